// The grammar of a valid tool call (tool_choice REQUIRED or a named function)
// in the format the model was trained on, with each function's arguments
// constrained by its parameters' JSON Schema (grammar/json_schema.h's
// AddJsonSchema). What it produces is what chat_output/chat_output.h parses:
//
//   kHermes      <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//                calls joined by "\n" (Qwen2.5 / Qwen3's template)
//   kLlama3Json  {"name": "NAME", "parameters": ARGS}
//                calls joined by "; " (Llama 3.1 / 3.2's JSON tool calling)
//
// ARGS in the compact layout (or indented, OutputConstraint::indented), the
// properties in the schema's order. One call, or one or more with
// parallel_tool_calls.
#pragma once

#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/spec.h"
#include "sampling/output_constraint.h"

namespace tpserve {

// `c.kind` must be kToolCalls with at least one function. INVALID_ARGUMENT
// names the function whose schema does not compile ("tools[get_weather]
// .parameters: ...") or the limit passed.
absl::StatusOr<grammar::Grammar> ToolCallGrammar(const OutputConstraint& c, const grammar::CompileLimits& limits);

}  // namespace tpserve
