// Counted automata (internal to the grammar engine): a regex P C{lo,hi} S
// with a large hi as the table of P C* S and a counter of C's iterations,
// instead of hi copies of C's states. A JSON string of maxLength 4000 is then
// a few dozen base states, not 80,000, and its lexer masks depend on the count
// only through min(count to lo, depth) and min(count to hi, depth)
// (TerminalAutomaton::ShortClass), so they are shared across the string.
//
// Counting is exact only when the table tells iterations apart: C is read
// between visits of one state, the loop, that is exactly "between two
// iterations" (C prefix-free, C and S not starting alike, ...). BuildCountedDfa
// checks that on the table it builds and declines otherwise.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "grammar/dfa.h"
#include "grammar/regex_ast.h"

namespace tpserve::grammar::internal {

// Counts above this are worth a counter.
inline constexpr int64_t kCountedRepeat = 16;

// The counted automaton of `ast` when its top level is C{lo,hi} or a
// concatenation with exactly one such part (hi > kCountedRepeat) and the
// counting is exact; nullopt otherwise (compile it as a plain DFA).
std::optional<Dfa> BuildCountedDfa(const RegexAst& ast, int64_t max_states, absl::Time deadline);

}  // namespace tpserve::grammar::internal
