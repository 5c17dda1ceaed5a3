// A Jinja2-subset template engine for Hugging Face chat templates: renders the
// `chat_template` of a checkpoint as transformers' apply_chat_template does
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// tojson with ensure_ascii=False, raise_exception, strftime_now), byte for byte.
// tests/jinja/conformance_test.cc holds it to Python's Jinja2 on real templates.
//
// What is supported is listed in jinja/parser.h (statements) and jinja/builtins.h
// (filters, tests, methods, globals); anything else fails in Parse with the
// construct and line named, so a checkpoint's template is rejected at start-up,
// not at the first request.
//
// Rendering is sandboxed: values expose only data and the listed methods,
// output, loop iterations, macro recursion and namespaces are bounded (RenderLimits),
// lists and dicts nest at most Value::kMaxNesting deep, reference cycles
// through namespaces are broken when a render ends, and
// every error -- including the template's own raise_exception -- comes back as a
// Status; nothing is thrown out of this interface.
//
// The output is a Text (jinja/text.h): each byte knows whether it came from the
// template source and trusted variables, or from the untrusted data.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/text.h"
#include "nlohmann/json.hpp"

namespace tpserve::jinja {

struct Program;

struct RenderLimits {
  size_t max_output_bytes = 8u << 20;      // the rendered text
  int64_t max_loop_iterations = 1000000;   // all for-loop iterations of one render together
  int max_macro_depth = 32;                // nested macro calls (recursion)
  int64_t max_namespaces = 100000;         // namespace() objects made by one render
};

class Template {
 public:
  // Parses `source`. A syntax error or an unsupported construct is InvalidArgument
  // "line N: ..." naming it.
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with the variables of `data` (strings untrusted: messages, tools, the
  // request's chat_template_kwargs) and of `trusted` (strings trusted: bos_token,
  // eos_token; booleans such as add_generation_prompt may go in either). A
  // variable in both takes its `trusted` value. Both must be JSON objects.
  // Errors are InvalidArgument: the template's raise_exception message verbatim,
  // or "line N: <what went wrong>" for a type error or an exceeded limit.
  absl::StatusOr<Text> Render(const nlohmann::ordered_json& data, const nlohmann::ordered_json& trusted,
                              const RenderLimits& limits = {}) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace tpserve::jinja
