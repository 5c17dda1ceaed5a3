// A grammar compiled against a vocabulary (internal to the grammar engine;
// matcher.h's CompiledGrammar): the terminals' automata, the parser's tables,
// and the chart's first set. Immutable once built; the caches it uses live in
// the vocabulary (lexer_cache.h).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grammar/earley.h"
#include "grammar/grammar.h"
#include "grammar/lexer_cache.h"
#include "grammar/spec.h"
#include "grammar/vocabulary_impl.h"

namespace tpserve::grammar {

class CompiledGrammar {
 public:
  std::shared_ptr<const internal::VocabularyImpl> vocabulary;
  std::vector<std::shared_ptr<const internal::TerminalAutomaton>> automata;  // [T]
  internal::ParserTables tables;
  std::shared_ptr<const internal::EarleySet> initial;  // the chart's set 0
  Grammar grammar;  // the normalized grammar (for dumps)
  size_t max_mask_items = 0;  // CompileLimits::max_mask_items
};

namespace internal {

// `grammar` prepared for the parser: each terminal's automaton (from the
// vocabulary's cache), terminals matching "" made optional, rules that match
// nothing removed (an error when the start rule is one), unreachable rules
// dropped, positions numbered. Bounded by `limits` (states, rules, memory)
// and `deadline`.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Normalize(const Grammar& grammar,
                                                                 std::shared_ptr<const VocabularyImpl> vocabulary,
                                                                 const CompileLimits& limits, absl::Time deadline);

}  // namespace internal
}  // namespace tpserve::grammar
