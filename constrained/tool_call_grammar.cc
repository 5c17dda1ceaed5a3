#include "constrained/tool_call_grammar.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grammar/json_schema.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using grammar::GrammarBuilder;
using grammar::Symbol;

// One call of `f`: the frame's literals around its arguments' rule.
absl::StatusOr<std::vector<Symbol>> CallOf(GrammarBuilder& b, const OutputConstraint& c, const ToolFunction& f,
                                           const grammar::CompileLimits& limits) {
  const grammar::JsonLayout layout = c.indented ? grammar::JsonLayout::kIndented : grammar::JsonLayout::kCompact;
  absl::StatusOr<Symbol> args = f.parameters_json.empty()
                                    ? grammar::AddJsonObject(b, layout, /*depth=*/1, limits)
                                    : grammar::AddJsonSchema(b, f.parameters_json, layout, /*depth=*/1, limits);
  if (!args.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tools[", f.name, "].parameters: ", args.status().message()));
  }
  const std::string name = nlohmann::json(f.name).dump();  // a JSON string, escaped
  const bool hermes = c.tool_format == OutputConstraint::ToolFormat::kHermes;
  const std::string open = absl::StrCat(hermes ? "<tool_call>\n" : "", "{\"name\": ", name,
                                        hermes ? ", \"arguments\": " : ", \"parameters\": ");
  return std::vector<Symbol>{b.Literal(open), *args, b.Literal(hermes ? "}\n</tool_call>" : "}")};
}

}  // namespace

absl::StatusOr<grammar::Grammar> ToolCallGrammar(const OutputConstraint& c, const grammar::CompileLimits& limits) {
  if (c.kind != OutputConstraint::Kind::kToolCalls || c.functions.empty()) {
    return absl::InvalidArgumentError("tools: no function to call; list at least one");
  }
  GrammarBuilder b;
  std::vector<std::vector<Symbol>> calls;
  for (const ToolFunction& f : c.functions) {
    absl::StatusOr<std::vector<Symbol>> call = CallOf(b, c, f, limits);
    if (!call.ok()) return call.status();
    calls.push_back(*std::move(call));
  }
  const Symbol call = b.Choice(std::move(calls), "call");
  const Symbol root = b.Rule("root");
  if (c.parallel_tool_calls) {
    const bool hermes = c.tool_format == OutputConstraint::ToolFormat::kHermes;
    b.Add(root, {b.SeparatedList(call, b.Literal(hermes ? "\n" : "; "), 1, -1)});
  } else {
    b.Add(root, {call});
  }
  return std::move(b).Build(root, limits);
}

}  // namespace tpserve
