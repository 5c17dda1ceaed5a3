// Grammars as text, in llama.cpp's GBNF dialect (its grammars/README.md):
//
//   root   ::= object                  # the start rule is `root`
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ":" ws value
//   ws     ::= [ \t\n]*
//
// Literals "..." (escapes \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH), character
// classes [a-z] [^...] (over Unicode characters, matched as UTF-8), any
// character ., grouping ( ), alternation |, repetition * + ? {m} {m,} {m,n},
// rule references, # comments. Rules whose language is regular (no recursion
// through them) become terminals, so a GBNF grammar gets the lexer/parser
// split without saying so. Left recursion is allowed.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grammar/grammar.h"
#include "grammar/spec.h"

namespace tpserve::grammar {

// INVALID_ARGUMENT naming the line, column and what is wrong; an undefined
// rule, a missing `root`, or past `limits`.
absl::StatusOr<Grammar> ParseGbnf(absl::string_view text, const CompileLimits& limits);

}  // namespace tpserve::grammar
