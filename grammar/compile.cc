// Compile: each GrammarSpec kind to the IR (regex: one terminal; choices: one
// terminal of the alternatives; GBNF: ebnf.h; JSON: json_schema.h), then
// Normalize against the vocabulary.
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/compiled_grammar.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace tpserve::grammar {
namespace {

absl::StatusOr<Grammar> OneTerminal(std::string regex, std::string name, const CompileLimits& limits) {
  GrammarBuilder builder;
  const Symbol root = builder.Rule("root");
  builder.Add(root, {builder.Terminal(std::move(regex), std::move(name))});
  return std::move(builder).Build(root, limits);
}

absl::StatusOr<Grammar> ChoiceGrammar(const std::vector<std::string>& choices, const CompileLimits& limits) {
  if (choices.empty()) return absl::InvalidArgumentError("choice: the list of choices is empty");
  std::string regex = "(?:";
  size_t bytes = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    bytes += choices[i].size();
    if (i > 0) regex += "|";
    regex += EscapeRegexLiteral(choices[i]);
  }
  if (bytes > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("choice: ", bytes, " bytes of choices, more than the limit of ",
                                                   limits.max_spec_bytes, " (CompileLimits::max_spec_bytes)"));
  }
  return OneTerminal(regex + ")", "choice", limits);
}

absl::StatusOr<Grammar> FrontEnd(const GrammarSpec& spec, const CompileLimits& limits) {
  if (spec.kind != GrammarSpec::Kind::kChoice && spec.text.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the grammar text has ", spec.text.size(),
                                                   " bytes, more than the limit of ", limits.max_spec_bytes,
                                                   " (CompileLimits::max_spec_bytes)"));
  }
  switch (spec.kind) {
    case GrammarSpec::Kind::kRegex:
      return OneTerminal(spec.text, "regex", limits);
    case GrammarSpec::Kind::kChoice:
      return ChoiceGrammar(spec.choices, limits);
    case GrammarSpec::Kind::kEbnf:
      return ParseGbnf(spec.text, limits);
    case GrammarSpec::Kind::kJsonSchema:
      return JsonSchemaGrammar(spec.text, spec.layout, limits);
    case GrammarSpec::Kind::kJsonObject:
      return JsonObjectGrammar(spec.layout, limits);
  }
  return absl::InvalidArgumentError("unknown grammar kind");
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const GrammarSpec& spec,
                                                               std::shared_ptr<const Vocabulary> vocabulary,
                                                               const CompileLimits& limits) {
  const absl::Time deadline = absl::Now() + limits.max_time;
  TPSERVE_ASSIGN_OR_RETURN(const Grammar grammar, FrontEnd(spec, limits));
  if (absl::Now() > deadline) {
    return absl::InvalidArgumentError("compiling the grammar took longer than the limit (CompileLimits::max_time)");
  }
  return internal::Normalize(grammar, internal::AsImpl(std::move(vocabulary)), limits, deadline);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(const Grammar& grammar,
                                                                      std::shared_ptr<const Vocabulary> vocabulary,
                                                                      const CompileLimits& limits) {
  const absl::Time deadline = absl::Now() + limits.max_time;
  return internal::Normalize(grammar, internal::AsImpl(std::move(vocabulary)), limits, deadline);
}

}  // namespace tpserve::grammar
