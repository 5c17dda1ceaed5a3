// The regular expressions of terminals, of GrammarSpec::kRegex and of JSON
// Schema `pattern`, over bytes (UTF-8 text is matched byte by byte; a
// character class with non-ASCII members matches their UTF-8 sequences).
//
// Dialect (a subset of ECMA-262 / PCRE without backtracking features):
// literals and escapes (\n \t \r \\ \. \xHH \uHHHH ...), . (any character
// but newline, as a UTF-8 sequence), classes [a-z], [^...], \d \w \s \D \W \S,
// groups ( ) and (?: ), alternation |, quantifiers * + ? {n} {n,} {n,m}
// (lazy forms as greedy: a regex here says which strings match, not how),
// anchors ^ and $ only at the start and end of the whole expression.
// Backreferences, lookaround and other non-regular constructs are
// INVALID_ARGUMENT naming the construct and its offset.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grammar/spec.h"

namespace tpserve::grammar {

// OK when `regex` is in the dialect and compiles within `limits`, as the
// engine compiles a terminal: one long repeat as a counted automaton (its
// iteration's states and a counter) when the count is exact, else a DFA.
absl::Status CheckRegex(absl::string_view regex, const CompileLimits& limits);

// A regex matching exactly `bytes`: metacharacters escaped, control bytes as
// \xHH; bytes >= 0x80 stand for themselves (a byte that starts no UTF-8
// sequence in a regex is matched as that byte).
std::string EscapeRegexLiteral(absl::string_view bytes);

}  // namespace tpserve::grammar
