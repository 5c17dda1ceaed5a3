// The grammar IR: a context-free grammar over bytes whose terminals are
// regular expressions (lexemes). Every front end (GBNF text, JSON Schema,
// regex, choices) builds one of these; the engine (matcher.h) compiles it.
//
// The split matters for speed: the engine lexes terminals with automata and
// parses only the sequence of lexemes, so a front end should put as much as
// it can into terminals (a JSON string with its escapes is one terminal, not
// a rule per character) and keep rules for what is context-free (nesting).
// Terminals are matched greedily: a lexeme ends where the next byte can no
// longer extend it, unless the grammar allows another lexeme to start there
// (the engine keeps every reading the grammar allows; see matcher.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "grammar/spec.h"

namespace tpserve::grammar {

struct Symbol {
  enum class Kind : uint8_t { kRule, kTerminal };
  Kind kind = Kind::kRule;
  int32_t id = 0;  // into Grammar::rules or Grammar::terminals
  friend bool operator==(const Symbol&, const Symbol&) = default;
};

struct Grammar {
  struct Terminal {
    std::string regex;  // regex.h's dialect; matches whole lexemes
    std::string name;   // for errors and dumps
  };
  struct Rule {
    std::string name;
    std::vector<std::vector<Symbol>> alternatives;  // an empty alternative matches the empty string
  };
  std::vector<Terminal> terminals;
  std::vector<Rule> rules;
  int32_t start = 0;  // a rule

  // The grammar as GBNF-like text (rules, then terminals as /regex/), for
  // tpserve-grammar --dump and test failures.
  std::string Dump() const;
};

// Builds a Grammar. Terminals are deduplicated by regex; rules may be
// referenced before they get alternatives (recursion).
class GrammarBuilder {
 public:
  Symbol Terminal(std::string regex, std::string name = "");
  Symbol Literal(std::string_view bytes);  // a terminal matching exactly `bytes` (escaped here)
  Symbol Rule(std::string name);           // a new rule with no alternatives yet
  void Add(Symbol rule, std::vector<Symbol> alternative);

  // Shorthands, each a new rule: a | b | ...;  s?;  s*;  s+;  s{min,max}
  // (max < 0: unbounded); s (sep s)* (min items, max < 0 unbounded).
  Symbol Choice(std::vector<std::vector<Symbol>> alternatives, std::string name = "");
  Symbol Optional(Symbol s);
  Symbol Star(Symbol s);
  Symbol Plus(Symbol s);
  Symbol Repeat(Symbol s, int min, int max);
  Symbol SeparatedList(Symbol item, Symbol separator, int min, int max);

  size_t size() const;  // rules + terminals so far (CompileLimits::max_rules)

  // The grammar starting at `start`. INVALID_ARGUMENT for a rule with no
  // alternatives, or past `limits`.
  absl::StatusOr<Grammar> Build(Symbol start, const CompileLimits& limits) &&;

 private:
  std::string NameOf(Symbol s) const;
  void AppendExactly(Symbol s, int64_t n, std::vector<Symbol>& seq);  // s{n}
  void AppendUpTo(Symbol s, int64_t n, std::vector<Symbol>& seq);     // s{0,n}, n >= 1

  Grammar grammar_;
  absl::flat_hash_map<std::string, int32_t> terminal_ids_;  // by regex
};

}  // namespace tpserve::grammar
