// What a sequence's output is constrained to (issue 26), as the scheduler and
// the step protocol carry it to rank 0, where the grammar engine turns it into
// a token mask beside the sampler (constrained/sequence_constraint.h). Plain
// data, no grammar engine here: the coordinator fills it from the request
// (structured_output, or tool_choice REQUIRED / FUNCTION), proto/step_convert
// sends it, and rank 0 compiles it (constrained/constraint_compiler.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpserve {

// A function the model may call (tool_choice REQUIRED / FUNCTION).
struct ToolFunction {
  std::string name;
  std::string parameters_json;  // its parameters' JSON Schema; "" = any JSON object
  friend bool operator==(const ToolFunction&, const ToolFunction&) = default;
};

struct OutputConstraint {
  enum class Kind : uint8_t {
    kJsonSchema,  // text: a JSON Schema
    kJsonObject,  // any JSON object
    kRegex,       // text: the whole output matches it (grammar/regex.h's dialect)
    kEbnf,        // text: a GBNF grammar, start rule `root` (grammar/ebnf.h)
    kChoice,      // choices: exactly one of them
    kToolCalls,   // calls of `functions` in `tool_format` (constrained/tool_call_grammar.h)
  };
  enum class ToolFormat : uint8_t {
    kHermes,      // Qwen: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
    kLlama3Json,  // Llama 3.x: {"name": "f", "parameters": {...}}
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  bool indented = false;  // JSON as json.dumps(indent=2); default compact
  // kToolCalls:
  ToolFormat tool_format = ToolFormat::kHermes;
  std::vector<ToolFunction> functions;  // at least one
  bool parallel_tool_calls = true;      // one or more calls; false: exactly one
  // Reasoning (a model with <think> ... </think> tokens; -1 = none): only the
  // answer after the reasoning is constrained. The first output token may
  // open the reasoning (think_start) instead of starting the answer; from
  // think_start (or from the start when starts_in_reasoning: the prompt
  // opened it) the output is free up to think_end, then constrained.
  int32_t think_start = -1;
  int32_t think_end = -1;
  bool starts_in_reasoning = false;

  friend bool operator==(const OutputConstraint&, const OutputConstraint&) = default;
};

}  // namespace tpserve
