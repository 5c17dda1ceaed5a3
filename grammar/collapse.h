// Regular content merged into single terminals (internal to the grammar
// engine), before the matcher sees the grammar.
//
// A lexeme boundary inside free text is what a mask pays most for: wherever a
// token may cross it, the walk below that trie node goes through the parser
// instead of the cached lexer mask. A front end that spells a counted run as
// rules over chunk terminals (a string of maxLength 200 as chunks of 16 and a
// tail) puts such a boundary every few characters. So a rule that is not
// recursive, has no literal among its terminals, and concatenates lexemes
// somewhere below it becomes one terminal: the regex of its expansion, when
// that automaton stays within a budget (else the rules stay as they were).
// Literals (keys, punctuation) are the grammar's structure and keep their
// rules, and alternatives of single lexemes stay alternatives, so lexer masks
// remain shared between grammars that use the same string or number lexeme.
#pragma once

#include "absl/time/time.h"
#include "grammar/grammar.h"
#include "grammar/lexer_cache.h"
#include "grammar/spec.h"

namespace tpserve::grammar::internal {

// `g` with its regular content collapsed, and terminals no rule uses left out.
// Automata are built through `cache` (limits as Normalize's); a terminal that
// does not compile is left for Normalize to report.
Grammar CollapseContent(const Grammar& g, LexerCache& cache, const CompileLimits& limits, absl::Time deadline);

// The automaton matches exactly one string.
bool IsLiteral(const Dfa& dfa);

}  // namespace tpserve::grammar::internal
