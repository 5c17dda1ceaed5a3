// GrammarBuilder and Grammar::Dump. Repetitions with large counts are built
// from O(log n) rules (s{0,2k} = s{0,k} s{0,k}) so that a count of 10^9
// costs 30 rules, not 10^9; small counts are spelled out (unambiguous, and
// cheaper to parse).
#include "grammar/grammar.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grammar/regex.h"

namespace tpserve::grammar {
namespace {

constexpr int kLinearRepeat = 16;  // counts up to this are spelled out

// "..." with C-style escapes, for names and dumps.
std::string Quote(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02X", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

Symbol GrammarBuilder::Terminal(std::string regex, std::string name) {
  auto [it, inserted] = terminal_ids_.try_emplace(regex, static_cast<int32_t>(grammar_.terminals.size()));
  if (inserted) {
    if (name.empty()) name = absl::StrCat("/", regex, "/");
    grammar_.terminals.push_back({std::move(regex), std::move(name)});
  }
  return {Symbol::Kind::kTerminal, it->second};
}

Symbol GrammarBuilder::Literal(std::string_view bytes) { return Terminal(EscapeRegexLiteral(absl::string_view(bytes.data(), bytes.size())), Quote(bytes)); }

Symbol GrammarBuilder::Rule(std::string name) {
  const auto id = static_cast<int32_t>(grammar_.rules.size());
  if (name.empty()) name = absl::StrCat("r", id);
  grammar_.rules.push_back({std::move(name), {}});
  return {Symbol::Kind::kRule, id};
}

void GrammarBuilder::Add(Symbol rule, std::vector<Symbol> alternative) {
  grammar_.rules[static_cast<size_t>(rule.id)].alternatives.push_back(std::move(alternative));
}

Symbol GrammarBuilder::Choice(std::vector<std::vector<Symbol>> alternatives, std::string name) {
  const Symbol rule = Rule(std::move(name));
  for (auto& alternative : alternatives) Add(rule, std::move(alternative));
  return rule;
}

std::string GrammarBuilder::NameOf(Symbol s) const {
  return s.kind == Symbol::Kind::kRule ? grammar_.rules[static_cast<size_t>(s.id)].name
                                       : grammar_.terminals[static_cast<size_t>(s.id)].name;
}

Symbol GrammarBuilder::Optional(Symbol s) { return Choice({{}, {s}}, absl::StrCat("(", NameOf(s), ")?")); }

// Left recursion: constant work per item in an Earley parser (right
// recursion completes the whole chain at the end).
Symbol GrammarBuilder::Star(Symbol s) {
  const Symbol rule = Rule(absl::StrCat("(", NameOf(s), ")*"));
  Add(rule, {});
  Add(rule, {rule, s});
  return rule;
}

Symbol GrammarBuilder::Plus(Symbol s) {
  const Symbol rule = Rule(absl::StrCat("(", NameOf(s), ")+"));
  Add(rule, {s});
  Add(rule, {rule, s});
  return rule;
}

// Appends to `seq` symbols matching exactly n copies of s.
void GrammarBuilder::AppendExactly(Symbol s, int64_t n, std::vector<Symbol>& seq) {
  if (n <= kLinearRepeat) {
    for (int64_t i = 0; i < n; ++i) seq.push_back(s);
    return;
  }
  Symbol power = s;  // s{2^k}
  for (int64_t bit = 1; bit <= n; bit <<= 1) {
    if ((n & bit) != 0) seq.push_back(power);
    if ((bit << 1) <= n) power = Choice({{power, power}}, absl::StrCat("(", NameOf(s), "){", bit << 1, "}"));
  }
}

// Appends symbols matching 0..n copies of s (n >= 1), with one reading per
// count. Large n: Q_k = s{0,2^k-1} = (s^(2^(k-1)))? Q_(k-1) reads the count's
// binary digits; s{0,n} = Q_k | s^(2^k) s{0,n-2^k} for 2^k-1 <= n < 2^(k+1)-1
// splits on whether the count reaches 2^k. O(log n) rules.
void GrammarBuilder::AppendUpTo(Symbol s, int64_t n, std::vector<Symbol>& seq) {
  const std::string base = NameOf(s);
  if (n <= kLinearRepeat) {  // (s (s (s)?)?)?: one reading per string
    Symbol tail = Optional(s);
    for (int64_t k = 2; k <= n; ++k) tail = Choice({{}, {s, tail}}, absl::StrCat("(", base, "){0,", k, "}"));
    seq.push_back(tail);
    return;
  }
  std::vector<Symbol> power = {s};             // power[j]: s{2^j}
  std::vector<Symbol> below = {Choice({{}})};  // below[k]: s{0,2^k-1}
  auto grow = [&](size_t k) {
    while (below.size() <= k) {
      const size_t j = below.size();  // below[j] = (power[j-1])? below[j-1]
      while (power.size() < j) {
        power.push_back(Choice({{power.back(), power.back()}}, absl::StrCat("(", base, "){", int64_t{1} << power.size(), "}")));
      }
      below.push_back(Choice({{Optional(power[j - 1]), below[j - 1]}},
                             absl::StrCat("(", base, "){0,", (int64_t{1} << j) - 1, "}")));
    }
  };
  std::vector<Symbol> prefix;  // s{2^k} for each level taken
  std::vector<Symbol> levels;
  std::vector<int64_t> bounds;  // the count bound at each level
  for (int64_t m = n; m > 0;) {
    bounds.push_back(m);
    size_t k = 0;
    while ((int64_t{2} << k) - 1 <= m) ++k;  // 2^k - 1 <= m < 2^(k+1) - 1
    grow(k + 1);
    if (m == (int64_t{1} << k) - 1) {
      levels.push_back(below[k]);
      break;
    }
    levels.push_back(below[k]);        // the count stays below 2^k ...
    prefix.push_back(power[k]);        // ... or takes 2^k and goes on with the rest
    m -= int64_t{1} << k;
    if (m == 0) levels.push_back(Choice({{}}));
  }
  // s{0,n} = levels[0] | prefix[0] (levels[1] | prefix[1] (...)).
  Symbol tail = levels.back();
  for (size_t i = levels.size() - 1; i-- > 0;) {
    tail = Choice({{levels[i]}, {prefix[i], tail}}, absl::StrCat("(", base, "){0,", bounds[i], "}"));
  }
  seq.push_back(tail);
}

Symbol GrammarBuilder::Repeat(Symbol s, int min, int max) {
  min = std::max(min, 0);
  const std::string name = absl::StrCat("(", NameOf(s), "){", min, ",", max < 0 ? "" : absl::StrCat(max), "}");
  const Symbol rule = Rule(name);
  if (max >= 0 && max < min) return rule;  // no alternatives: Build names it
  std::vector<Symbol> seq;
  AppendExactly(s, min, seq);
  if (max < 0) {
    seq.push_back(Star(s));
  } else if (max > min) {
    AppendUpTo(s, max - min, seq);
  }
  Add(rule, std::move(seq));
  return rule;
}

Symbol GrammarBuilder::SeparatedList(Symbol item, Symbol separator, int min, int max) {
  min = std::max(min, 0);
  const std::string name = absl::StrCat("list(", NameOf(item), ",", NameOf(separator), "){", min, ",",
                                        max < 0 ? "" : absl::StrCat(max), "}");
  if (max == 0) return Choice({{}}, name);
  if (max >= 0 && max < min) return Rule(name);  // no alternatives: Build names it
  const Symbol next = Choice({{separator, item}}, absl::StrCat(NameOf(separator), " ", NameOf(item)));
  const Symbol tail = Repeat(next, std::max(min - 1, 0), max < 0 ? -1 : max - 1);
  const Symbol list = Choice({{item, tail}}, name);
  return min == 0 ? Optional(list) : list;
}

size_t GrammarBuilder::size() const { return grammar_.rules.size() + grammar_.terminals.size(); }

absl::StatusOr<Grammar> GrammarBuilder::Build(Symbol start, const CompileLimits& limits) && {
  if (size() > limits.max_rules) {
    return absl::InvalidArgumentError(absl::StrCat("the grammar has ", size(), " rules and terminals, more than the limit of ",
                                                   limits.max_rules, " (CompileLimits::max_rules)"));
  }
  if (start.kind != Symbol::Kind::kRule || start.id < 0 || static_cast<size_t>(start.id) >= grammar_.rules.size()) {
    return absl::InvalidArgumentError("the start symbol is not a rule of the grammar");
  }
  for (const Grammar::Rule& rule : grammar_.rules) {
    if (rule.alternatives.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("rule '", rule.name, "' has no alternatives"));
    }
    for (const auto& alternative : rule.alternatives) {
      for (const Symbol& s : alternative) {
        const size_t n = s.kind == Symbol::Kind::kRule ? grammar_.rules.size() : grammar_.terminals.size();
        if (s.id < 0 || static_cast<size_t>(s.id) >= n) {
          return absl::InvalidArgumentError(absl::StrCat("rule '", rule.name, "' names a symbol that does not exist"));
        }
      }
    }
  }
  grammar_.start = start.id;
  return std::move(grammar_);
}

std::string Grammar::Dump() const {
  std::string out;
  auto name = [&](const Symbol& s) {
    return s.kind == Symbol::Kind::kRule ? rules[static_cast<size_t>(s.id)].name
                                         : terminals[static_cast<size_t>(s.id)].name;
  };
  for (size_t r = 0; r < rules.size(); ++r) {
    absl::StrAppend(&out, rules[r].name, r == static_cast<size_t>(start) ? " (start)" : "", " ::=");
    for (size_t a = 0; a < rules[r].alternatives.size(); ++a) {
      if (a > 0) out += " |";
      if (rules[r].alternatives[a].empty()) out += " \"\"";
      for (const Symbol& s : rules[r].alternatives[a]) absl::StrAppend(&out, " ", name(s));
    }
    out += "\n";
  }
  for (const Terminal& t : terminals) absl::StrAppend(&out, t.name, " ::= /", t.regex, "/\n");
  return out;
}

}  // namespace tpserve::grammar
