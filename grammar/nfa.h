// Thompson NFA over bytes (internal to the grammar engine): what a RegexAst
// becomes before the subset construction (dfa.h). Arcs are kept in one arena,
// chained per state, so building 10^5 states costs no per-state allocation.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grammar/regex_ast.h"

namespace tpserve::grammar::internal {

struct Nfa {
  struct Arc {
    int32_t to = 0;
    int32_t next = -1;  // next arc of the same state, -1 ends the chain
    uint8_t lo = 0, hi = 0;
    bool epsilon = false;  // true: lo/hi unused
  };
  std::vector<int32_t> first_arc;  // [states] head of each state's chain, -1 when none
  std::vector<Arc> arcs;           // [arcs]
  int32_t start = 0;
  int32_t accept = 0;
  int32_t marked = -1;  // the loop state of the star built for BuildNfa's star_node, -1 none

  int32_t num_states() const { return static_cast<int32_t>(first_arc.size()); }
};

// INVALID_ARGUMENT when the NFA would need more than `max_states` states (a
// counted repetition of a counted repetition, ...) or past `deadline`.
// star_node: a kRepeat node built as its child's star, its loop state marked
// (counted_dfa.h counts the iterations instead).
absl::StatusOr<Nfa> BuildNfa(const RegexAst& ast, int64_t max_states, absl::Time deadline, int32_t star_node = -1);

}  // namespace tpserve::grammar::internal
