// libFuzzer target: the chat template engine on arbitrary template sources and
// on arbitrary message contents under the real templates (tests/jinja/templates).
// Built only with -DTPSERVE_FUZZ=ON by clang (scripts/fuzz.sh), with ASan + UBSan.
//
// Input: first byte picks the mode. 0: the rest is a template source, rendered
// with a fixed conversation. 1..4: the rest is split at '\x01' into message
// contents (roles cycling user/assistant/tool/system) rendered by Llama 3.1,
// Llama 3.2, Qwen2.5 or Qwen3's template, with and without tools.
// Besides "no crash, no leak, no UB, no exception out of the engine", it checks
// what the engine promises: errors are InvalidArgument or ResourceExhausted, the
// output stays within the limit, and its runs cover exactly its bytes.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "jinja/template.h"

namespace {

using Json = nlohmann::ordered_json;
using tpserve::jinja::RenderLimits;
using tpserve::jinja::Template;
using tpserve::jinja::Text;

const char* const kTemplates[] = {"llama3.1", "llama3.2", "qwen2.5", "qwen3"};

std::optional<Template> LoadReal(int i) {
  std::ifstream in(std::string(TPSERVE_SOURCE_DIR) + "/tests/jinja/templates/" + kTemplates[i] + ".jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  auto t = Template::Parse(ss.str());
  if (!t.ok()) std::abort();  // the committed templates must parse
  return *std::move(t);
}

void Check(const absl::StatusOr<Text>& out, const RenderLimits& limits) {
  if (!out.ok()) {
    if (out.status().code() != absl::StatusCode::kInvalidArgument &&
        out.status().code() != absl::StatusCode::kResourceExhausted) {
      std::abort();
    }
    return;
  }
  if (out->size() > limits.max_output_bytes) std::abort();
  if (!out->empty() && (out->runs().empty() || out->runs().back().end != out->size())) std::abort();
}

Json Tools() {
  return Json::parse(R"([{"type": "function", "function": {"name": "f", "description": "d",
                        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}])");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Template> real = [] {
    std::vector<Template> v;
    for (int i = 0; i < 4; ++i) v.push_back(*LoadReal(i));
    return v;
  }();
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 20000;
  const Json trusted = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|im_end|>"}};
  const int mode = data[0] % 5;
  if (mode == 0) {
    auto t = Template::Parse(rest);
    if (!t.ok()) {
      if (t.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
      return 0;
    }
    const Json vars = {{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}},
                       {"tools", Tools()}, {"add_generation_prompt", true}};
    Check(t->Render(vars, trusted, limits), limits);
    return 0;
  }
  static const char* const kRoles[] = {"user", "assistant", "tool", "system"};
  Json messages = Json::array();
  size_t begin = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == '\x01') {
      Json m = {{"role", kRoles[messages.size() % 4]}, {"content", rest.substr(begin, i - begin)}};
      messages.push_back(std::move(m));
      begin = i + 1;
    }
  }
  for (const Json& tools : {Json(nullptr), Tools()}) {
    const Json vars = {{"messages", messages}, {"tools", tools}, {"add_generation_prompt", true}, {"enable_thinking", false}};
    Check(real[static_cast<size_t>(mode - 1)].Render(vars, trusted, limits), limits);
  }
  return 0;
}
