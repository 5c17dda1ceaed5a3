// A deterministic automaton over bytes (internal to the grammar engine): what
// each terminal's regex compiles to, and what the lexer steps through. Only
// live states exist (every state can still reach an accepting one): a
// transition to -1 means the bytes so far can no longer be extended to a match.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grammar/nfa.h"

namespace tpserve::grammar::internal {

struct Dfa {
  std::array<uint8_t, 256> byte_class{};  // [256] byte -> its class (bytes no regex tells apart share one)
  int32_t num_classes = 1;
  int32_t start = -1;                      // -1: the regex matches nothing
  std::vector<int32_t> next;               // [num_states * num_classes] next state, -1 dead
  std::vector<uint8_t> accepting;          // [num_states] the bytes so far are a match
  std::vector<uint8_t> extendable;         // [num_states] some byte leads to a live state
  std::array<uint64_t, 4> first_bytes{};   // bits of the bytes with a live transition from start

  int32_t num_states() const { return static_cast<int32_t>(accepting.size()); }
  int32_t Next(int32_t state, uint8_t byte) const {
    return next[static_cast<size_t>(state) * static_cast<size_t>(num_classes) + byte_class[byte]];
  }
  bool MatchesEmpty() const { return start >= 0 && accepting[static_cast<size_t>(start)] != 0; }
  size_t MemoryBytes() const { return next.size() * sizeof(int32_t) + accepting.size() * 2 + sizeof(Dfa); }
};

// Subset construction of `nfa`, keeping live states only. INVALID_ARGUMENT past
// `max_states` DFA states or past `deadline`.
absl::StatusOr<Dfa> BuildDfa(const Nfa& nfa, int64_t max_states, absl::Time deadline);

// `regex` (regex.h's dialect) parsed, then BuildNfa (at most 4 * max_states
// NFA states), then BuildDfa. Errors name the construct or the limit.
absl::StatusOr<Dfa> CompileRegex(absl::string_view regex, int64_t max_states, absl::Time deadline);

// Classes of states no string of at most `depth` bytes tells apart (Moore's
// refinement, `depth` rounds or until stable): from two states of one class
// every string of <= depth bytes is live, and accepting, from both or from
// neither. A token mask depends only on this when depth >= the longest token.
// Each state its own class when the refinement would cost more than `budget`
// steps.
std::vector<int32_t> DepthClasses(const Dfa& dfa, int depth, int64_t budget);

// The same language without the empty string (a new start state that is not
// accepting); start -1 when nothing is left.
Dfa WithoutEmpty(const Dfa& dfa);

}  // namespace tpserve::grammar::internal
