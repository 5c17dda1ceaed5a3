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

// A counted automaton (counted_dfa.h) runs the table of P C* S and counts the
// iterations of C, bounding them to [lo, hi]: its states are virtual, base
// state q in C (or the loop state) with count k being q + base * k.
struct Counter {
  enum Region : uint8_t { kP, kC, kS, kLoop };
  int32_t loop = -1;            // the base state between two iterations of C
  int64_t lo = 0, hi = 0;       // the iterations allowed
  std::vector<uint8_t> region;  // [base states] before the loop, inside C, after it, or the loop
  bool has_c = false;           // the loop state has bytes into C ...
  bool has_s = false;           // ... and into S
  int32_t fresh = -1;           // a virtual start: the loop with count 0, not accepting (WithoutEmpty)
};

struct Dfa {
  std::array<uint8_t, 256> byte_class{};  // [256] byte -> its class (bytes no regex tells apart share one)
  int32_t num_classes = 1;
  int32_t start = -1;                      // -1: the regex matches nothing
  std::vector<int32_t> next;               // [num_states * num_classes] next state, -1 dead
  std::vector<uint8_t> accepting;          // [num_states] the bytes so far are a match
  std::vector<uint8_t> extendable;         // [num_states] some byte leads to a live state
  std::array<uint64_t, 4> first_bytes{};   // bits of the bytes with a live transition from start
  int32_t loop = -1;  // BuildDfa: the state that is exactly the closure of nfa.marked, -1 when none is
  bool counted = false;
  Counter counter;    // when counted

  // Base states (a counted automaton's virtual states are more).
  int32_t num_states() const { return static_cast<int32_t>(accepting.size()); }
  int32_t Next(int32_t state, uint8_t byte) const {
    if (counted) return CountedNext(state, byte);
    return next[static_cast<size_t>(state) * static_cast<size_t>(num_classes) + byte_class[byte]];
  }
  bool Accepting(int32_t state) const {
    return counted ? CountedAccepting(state) : accepting[static_cast<size_t>(state)] != 0;
  }
  bool Extendable(int32_t state) const {
    return counted ? CountedExtendable(state) : extendable[static_cast<size_t>(state)] != 0;
  }
  bool MatchesEmpty() const { return start >= 0 && Accepting(start); }
  size_t MemoryBytes() const { return next.size() * sizeof(int32_t) + accepting.size() * 3 + sizeof(Dfa); }

  // counted_dfa.cc
  int32_t CountedNext(int32_t state, uint8_t byte) const;
  bool CountedAccepting(int32_t state) const;
  bool CountedExtendable(int32_t state) const;
};

// Subset construction of `nfa`, keeping live states only. INVALID_ARGUMENT past
// `max_states` DFA states or past `deadline`.
absl::StatusOr<Dfa> BuildDfa(const Nfa& nfa, int64_t max_states, absl::Time deadline);

// `regex` (regex.h's dialect) parsed, then BuildNfa (at most 4 * max_states
// NFA states), then BuildDfa. Errors name the construct or the limit.
absl::StatusOr<Dfa> CompileRegex(absl::string_view regex, int64_t max_states, absl::Time deadline);
absl::StatusOr<Dfa> CompileRegexAst(const RegexAst& ast, int64_t max_states, absl::Time deadline);

// Classes of (base) states no string of at most `depth` bytes tells apart
// (Moore's refinement, `depth` rounds or until stable): from two states of
// one class every string of <= depth bytes is live, and accepting, from both
// or from neither (and, when `distinguished` >= 0, passes through that state
// at the same places). A token mask depends only on this when depth >= the
// longest token. Each state its own class when the refinement would cost more
// than `budget` steps.
std::vector<int32_t> DepthClasses(const Dfa& dfa, int depth, int64_t budget, int32_t distinguished = -1);

// Whether no string of at most `depth` bytes tells state `a` of `dfa_a` from
// state `b` of `dfa_b` apart (live, and accepting, after the same strings):
// then a lexer mask over tokens of at most `depth` bytes is the same from
// both. False too when deciding it would visit more than `budget` pairs.
bool EquivalentStates(const Dfa& dfa_a, int32_t a, const Dfa& dfa_b, int32_t b, int depth, int64_t budget);

// The same language without the empty string (a new start state that is not
// accepting; for a counted automaton, its fresh virtual start); start -1 when
// nothing is left.
Dfa WithoutEmpty(const Dfa& dfa);

}  // namespace tpserve::grammar::internal
