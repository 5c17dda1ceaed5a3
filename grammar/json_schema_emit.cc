// Pass 4 of the JSON Schema compiler (json_schema.cc describes the passes):
// rules and terminals through GrammarBuilder. One rule per conj (per conj
// and depth in the indented layout, whose whitespace depends on depth); an
// object is a chain of two rules per member so that optional members cost
// O(n); arrays count their items with GrammarBuilder::Repeat; strings,
// numbers and enums are terminals, long runs of one class chunked.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grammar/counted_dfa.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/regex_ast.h"

namespace tpserve::grammar::json_internal {

// ---- pass 4 ----

Symbol Compiler::Term(std::string regex, std::string name) {
  regex_bytes_ += regex.size();
  return builder_.Terminal(std::move(regex), std::move(name));
}

bool Compiler::AltNonemptyAt(const Local& alt, const AltInfo& info, int depth) {
  if (!Indented()) return AltNonempty(alt, info);
  if (alt.has_enum) return !info.enum_ok.empty();
  if ((info.types & (kNull | kBool | kInt | kFrac | kStr)) != 0) return true;
  auto holds = [&](int c) { return NonemptyAt(c, depth + 1); };
  return ((info.types & kArr) != 0 && ArrayFeasible(alt, holds)) ||
         ((info.types & kObj) != 0 && ObjectFeasible(alt, holds));
}

// Whether the conj holds a value nested `depth` deep (the indented layout
// stops at max_nesting; the compact one has no depth).
bool Compiler::NonemptyAt(int conj, int depth) {
  if (conj == kTrue) return true;
  if (!Indented()) return nonempty_[conj];
  if (depth > limits_.max_nesting || !nonempty_[conj]) return false;
  auto key = std::make_pair(conj, depth);
  if (auto it = nonempty_at_.find(key); it != nonempty_at_.end()) return it->second;
  const std::vector<Local>& alts = flat_.at(conj);
  const std::vector<AltInfo>& infos = infos_.at(conj);
  bool any = false;
  for (size_t i = 0; i < alts.size() && !any; ++i) any = AltNonemptyAt(alts[i], infos[i], depth);
  nonempty_at_[key] = any;
  return any;
}

Symbol Compiler::EmitConj(int conj, int depth) {
  if (conj == kTrue) return AnyValue(Indented() ? depth : 0);
  const auto key = std::make_pair(conj, DepthKey(depth));
  if (auto it = rules_.find(key); it != rules_.end()) return it->second;
  const std::vector<Local>& alts = flat_.at(conj);
  if (alts.size() == 1 && alts[0].Unconstrained()) return AnyValue(Indented() ? depth : 0);
  std::string name = alts.empty() || alts[0].where.empty() ? "root" : alts[0].where;
  if (Indented()) absl::StrAppend(&name, "@", depth);
  const Symbol rule = builder_.Rule(std::move(name));
  rules_[key] = rule;
  pending_.emplace_back(conj, depth, rule);
  return rule;
}

absl::Status Compiler::FillConj(int conj, int depth, Symbol rule) {
  const std::vector<Local>& alts = flat_.at(conj);
  const std::vector<AltInfo>& infos = infos_.at(conj);
  bool any = false;
  for (size_t i = 0; i < alts.size(); ++i) {
    if (!AltNonemptyAt(alts[i], infos[i], depth)) continue;
    for (auto& seq : EmitAlt(alts[i], infos[i], depth)) {
      builder_.Add(rule, std::move(seq));
      any = true;
    }
  }
  if (!any) return absl::InternalError("an empty rule was emitted");
  return absl::OkStatus();
}

std::vector<std::vector<Symbol>> Compiler::EmitAlt(const Local& alt, const AltInfo& info, int depth) {
  std::vector<std::vector<Symbol>> out;
  if (alt.has_enum) {
    std::vector<std::string> literals;
    absl::flat_hash_set<std::string> seen;
    for (const json* v : info.enum_ok) {
      std::string text = Serialize(*v, layout_, depth);
      if (seen.insert(text).second) literals.push_back(std::move(text));
    }
    if (literals.size() == 1) {
      out.push_back({builder_.Literal(literals[0])});
    } else {
      std::string regex = "(?:";
      for (size_t i = 0; i < literals.size(); ++i) absl::StrAppend(&regex, i ? "|" : "", RegexLiteral(literals[i]));
      out.push_back({Term(regex + ")", absl::StrCat(alt.where.empty() ? "root" : alt.where, ".enum"))});
    }
    return out;
  }
  if ((info.types & kNull) != 0) out.push_back({builder_.Literal("null")});
  if ((info.types & kBool) != 0) out.push_back({Term("true|false", "boolean")});
  if ((info.types & (kInt | kFrac)) != 0) {
    std::vector<std::string> parts;
    if (!info.multiples.empty()) {
      parts = info.multiples;
    } else if (!alt.lower && !alt.upper && (info.types & kFrac) != 0) {
      parts.push_back(kAnyNumberRegex);
    } else {
      if ((info.types & kInt) != 0) {
        parts.push_back(!alt.lower && !alt.upper ? std::string("(?:") + kAnyIntegerRegex + ")"
                                                 : IntRangeRegex(info.ints));
      }
      if ((info.types & kFrac) != 0) parts.push_back(FracRangeRegex(info.fracs));
    }
    out.push_back({Term(absl::StrJoin(parts, "|"), (info.types & kFrac) != 0 ? "number" : "integer")});
  }
  if ((info.types & kStr) != 0) out.push_back(EmitString(info.string_re));
  auto holds = [&](int c) { return NonemptyAt(c, depth + 1); };
  if ((info.types & kArr) != 0 && ArrayFeasible(alt, holds)) out.push_back(EmitArray(alt, depth));
  if ((info.types & kObj) != 0 && ObjectFeasible(alt, holds)) out.push_back(EmitObject(alt, depth));
  return out;
}

// `set`{min,max} (max < 0: unbounded) as rules over chunk terminals:
// exactly `min` (whole chunks and a remainder), then up to max - min more
// (fewer than q2 whole chunks and a short tail, or q2 chunks and a tail of at
// most r2: one reading per length).
Symbol Compiler::CountedUnits(const CodepointRanges& set, int64_t min, int64_t max) {
  const std::string unit = absl::StrCat("(?:", SpellJsonContent(Re::Set(set)), ")");
  auto units = [&](int64_t lo, int64_t hi) {
    const std::string count = hi < 0 ? absl::StrCat("{", lo, ",}") : lo == hi ? absl::StrCat("{", lo, "}")
                                                                              : absl::StrCat("{", lo, ",", hi, "}");
    return Term(unit + count, absl::StrCat("chars{", lo, ",", hi < 0 ? "" : absl::StrCat(hi), "}"));
  };
  const Symbol chunk = units(kChunk, kChunk);
  std::vector<Symbol> seq;
  if (min / kChunk > 0) {
    seq.push_back(builder_.Repeat(chunk, static_cast<int>(min / kChunk), static_cast<int>(min / kChunk)));
  }
  if (min % kChunk > 0) seq.push_back(units(min % kChunk, min % kChunk));
  if (max < 0) {
    seq.push_back(units(0, -1));
  } else if (const int64_t n = max - min; n > 0 && n <= kLongRun) {
    seq.push_back(units(0, n));
  } else if (n > 0) {
    const int64_t q = n / kChunk, r = n % kChunk;
    std::vector<std::vector<Symbol>> alternatives;
    alternatives.push_back({builder_.Repeat(chunk, 0, static_cast<int>(q - 1)), units(0, kChunk - 1)});
    std::vector<Symbol> full = {builder_.Repeat(chunk, static_cast<int>(q), static_cast<int>(q))};
    if (r > 0) full.push_back(units(0, r));
    alternatives.push_back(std::move(full));
    seq.push_back(builder_.Choice(std::move(alternatives), absl::StrCat("chars{0,", n, "}")));
  }
  return builder_.Choice({std::move(seq)}, absl::StrCat("chars{", min, ",", max < 0 ? "" : absl::StrCat(max), "}"));
}

bool Compiler::CountsExactly(const std::string& regex) const {
  absl::StatusOr<internal::RegexAst> ast = internal::ParseRegex(regex);
  return ast.ok() && internal::BuildCountedDfa(*ast, kMaxCountedStates, deadline_).has_value();
}

// A string with value language `value`: one terminal with its quotes, unless
// a long run of one class is better counted by rules (kLongRun) because its
// counting would not be exact.
std::vector<Symbol> Compiler::EmitString(const Re& value) {
  auto long_run = [](const Re& re) {
    return re.kind == Re::Kind::kRepeat && re.kids[0].kind == Re::Kind::kSet &&
           (re.max < 0 ? re.min > kLongRun : re.max > kLongRun);
  };
  std::vector<const Re*> parts;
  if (value.kind == Re::Kind::kConcat) {
    for (const Re& kid : value.kids) parts.push_back(&kid);
  } else {
    parts.push_back(&value);
  }
  const auto runs = std::count_if(parts.begin(), parts.end(), [&](const Re* p) { return long_run(*p); });
  if (runs == 0) return {Term(absl::StrCat("\"", SpellJsonContent(value), "\""), "string")};
  // One bounded run: the whole string is one counted terminal (counted_dfa.h),
  // when its counting is exact; a few dozen states, masks shared along the run.
  if (std::string whole = absl::StrCat("\"", SpellJsonContent(value), "\""); runs == 1 && CountsExactly(whole)) {
    return {Term(std::move(whole), "string")};
  }
  std::vector<Symbol> seq;
  std::string text = "\"";  // regex text not yet made a terminal
  for (const Re* p : parts) {
    if (!long_run(*p)) {
      text += p->kind == Re::Kind::kAlt ? absl::StrCat("(?:", SpellJsonContent(*p), ")") : SpellJsonContent(*p);
      continue;
    }
    if (!text.empty()) seq.push_back(Term(std::exchange(text, ""), "string part"));
    seq.push_back(CountedUnits(p->kids[0].set, p->min, p->max));
  }
  seq.push_back(Term(text + "\"", "string end"));
  return seq;
}

std::vector<Symbol> Compiler::EmitObject(const Local& alt, int depth) {
  std::vector<Member> members;
  std::vector<std::u32string> names;
  for (const auto& [name, c] : alt.props) {
    const bool req = std::find(alt.required.begin(), alt.required.end(), name) != alt.required.end();
    names.push_back(DecodeUtf8(name));
    if (NonemptyAt(c, depth + 1)) members.push_back({name, c, req});
  }
  for (const std::string& r : alt.required) {
    if (std::none_of(alt.props.begin(), alt.props.end(), [&](const auto& p) { return p.first == r; })) {
      names.push_back(DecodeUtf8(r));
      members.push_back({r, alt.additional, true});  // checked nonempty by AltNonemptyAt
    }
  }
  const bool extra = NonemptyAt(alt.additional, depth + 1);
  const std::string open = Indented() ? "\n" + Indent(depth + 1) : "";
  const std::string sep = Indented() ? ",\n" + Indent(depth + 1) : ",";
  const std::string colon = Indented() ? ": " : ":";
  const std::string close = Indented() ? "\n" + Indent(depth) + "}" : "}";
  const std::string where = alt.where.empty() ? "root" : alt.where;

  if (alt.min_props > 0 || alt.max_props >= 0) return EmitCountedObject(alt, members, names, extra, depth);

  // first[i] / rest[i]: the members from i on, before / after the first one written.
  const size_t n = members.size();
  std::vector<std::optional<Symbol>> first(n + 1), rest(n + 1);
  // Another member: its name (any but the declared ones) and colon are one
  // terminal, shared by the first and the later positions (its automaton is
  // the costliest of the object's).
  std::optional<Symbol> extra_value, extra_key;
  if (extra) {
    extra_value = EmitConj(alt.additional, depth + 1);
    const std::string key = SpellJsonContent(AnyStringExcept(names));
    extra_key = Term(absl::StrCat("\"", key, "\"", RegexLiteral(colon)), where + ".key");
  }
  // rest[n]: close, or more additional properties.
  rest[n] = builder_.Rule(where + ".tail");
  builder_.Add(*rest[n], {builder_.Literal(close)});
  if (extra) builder_.Add(*rest[n], {builder_.Literal(sep), *extra_key, *extra_value, *rest[n]});
  for (size_t i = n; i-- > 1;) {
    const Member& m = members[i];
    const Symbol value = EmitConj(m.conj, depth + 1);
    const Symbol key = builder_.Literal(absl::StrCat(sep, Quote(m.name), colon));
    if (m.required) {
      rest[i] = builder_.Choice({{key, value, *rest[i + 1]}}, absl::StrCat(where, ".", m.name));
    } else {
      rest[i] = builder_.Choice({{key, value, *rest[i + 1]}, {*rest[i + 1]}}, absl::StrCat(where, ".", m.name, "?"));
    }
  }
  // first[i] exists while every member before i is optional.
  size_t last_first = 0;
  while (last_first < n && !members[last_first].required) ++last_first;
  // first[k] for k in [0, last_first]; first[n] only when all are optional.
  for (size_t i = std::min(last_first, n) + 1; i-- > 0;) {
    const Symbol rule = builder_.Rule(absl::StrCat(where, ".first", i));
    if (i == n) {
      builder_.Add(rule, {builder_.Literal("}")});
      if (extra && open.empty()) builder_.Add(rule, {*extra_key, *extra_value, *rest[n]});
      if (extra && !open.empty()) builder_.Add(rule, {builder_.Literal(open), *extra_key, *extra_value, *rest[n]});
    } else {
      const Member& m = members[i];
      const Symbol value = EmitConj(m.conj, depth + 1);
      const Symbol key = builder_.Literal(absl::StrCat(open, Quote(m.name), colon));
      builder_.Add(rule, {key, value, *rest[i + 1]});
      if (!m.required) builder_.Add(rule, {*first[i + 1]});
    }
    first[i] = rule;
  }
  return {builder_.Literal("{"), *first[0]};
}

// An object with minProperties / maxProperties: the chain's states are
// (member i next, c members written), c counted up to maxProperties (or up to
// minProperties when there is no maximum: more is all the same), built from
// the end so that each state knows whether it can still finish.
std::vector<Symbol> Compiler::EmitCountedObject(const Local& alt, const std::vector<Member>& members,
                                                const std::vector<std::u32string>& names, bool extra, int depth) {
  const std::string open = Indented() ? "\n" + Indent(depth + 1) : "";
  const std::string sep = Indented() ? ",\n" + Indent(depth + 1) : ",";
  const std::string colon = Indented() ? ": " : ":";
  const std::string close = Indented() ? "\n" + Indent(depth) + "}" : "}";
  const std::string where = alt.where.empty() ? "root" : alt.where;
  const int64_t cap = alt.max_props >= 0 ? alt.max_props : alt.min_props;
  const size_t n = members.size();
  auto norm = [&](int64_t c) { return std::min(c, cap); };
  auto lead = [&](int64_t c) { return c == 0 ? open : sep; };
  std::optional<Symbol> extra_key, extra_value;
  if (extra) {
    extra_value = EmitConj(alt.additional, depth + 1);
    extra_key = Term(absl::StrCat("\"", SpellJsonContent(AnyStringExcept(names)), "\"", RegexLiteral(colon)),
                     where + ".key");
  }
  auto seq = [&](const std::string& l, std::vector<Symbol> rest) {
    std::vector<Symbol> out;
    if (!l.empty()) out.push_back(builder_.Literal(l));
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  };
  // after[c]: the tail once every declared member is decided (others, close).
  std::vector<std::optional<Symbol>> next(static_cast<size_t>(cap) + 1), here(static_cast<size_t>(cap) + 1);
  for (int64_t c = cap; c >= 0; --c) {
    std::vector<std::vector<Symbol>> alternatives;
    if (c >= alt.min_props) alternatives.push_back({builder_.Literal(c == 0 ? "}" : close)});
    const bool more = alt.max_props < 0 || c < alt.max_props;
    const auto to = static_cast<size_t>(norm(c + 1));
    if (extra && more && (to == static_cast<size_t>(c) || here[to])) {
      const Symbol rule = builder_.Rule(absl::StrCat(where, ".more", c));
      here[static_cast<size_t>(c)] = rule;  // a self-loop when c is the cap
      std::vector<Symbol> tail = {*extra_key, *extra_value, *here[to]};
      alternatives.push_back(seq(lead(c), tail));
      for (auto& a : alternatives) builder_.Add(rule, std::move(a));
      continue;
    }
    if (!alternatives.empty()) here[static_cast<size_t>(c)] = builder_.Choice(std::move(alternatives), absl::StrCat(where, ".end", c));
  }
  for (size_t i = n; i-- > 0;) {
    next.swap(here);
    std::fill(here.begin(), here.end(), std::nullopt);
    const Member& m = members[i];
    const Symbol value = EmitConj(m.conj, depth + 1);
    for (int64_t c = cap; c >= 0; --c) {
      std::vector<std::vector<Symbol>> alternatives;
      const bool more = alt.max_props < 0 || c < alt.max_props;
      if (const auto to = static_cast<size_t>(norm(c + 1)); more && next[to]) {
        alternatives.push_back({builder_.Literal(absl::StrCat(lead(c), Quote(m.name), colon)), value, *next[to]});
      }
      if (!m.required && next[static_cast<size_t>(c)]) alternatives.push_back({*next[static_cast<size_t>(c)]});
      if (!alternatives.empty()) {
        here[static_cast<size_t>(c)] = builder_.Choice(std::move(alternatives), absl::StrCat(where, ".", m.name, "#", c));
      }
    }
  }
  // ObjectFeasible guarantees the start state can finish; were it not so, a
  // rule without alternatives makes Build fail rather than admit anything.
  return {builder_.Literal("{"), here[0] ? *here[0] : builder_.Rule(where + ".impossible")};
}

std::vector<Symbol> Compiler::EmitArray(const Local& alt, int depth) {
  const std::string open = Indented() ? "\n" + Indent(depth + 1) : "";
  const std::string sep = Indented() ? ",\n" + Indent(depth + 1) : ",";
  const std::string close = Indented() ? "\n" + Indent(depth) + "]" : "]";
  const std::string where = alt.where.empty() ? "root" : alt.where;
  const auto k = static_cast<int64_t>(alt.prefix.size());
  int64_t max = alt.max_items;
  for (int64_t i = 0; i < k; ++i) {
    if (!NonemptyAt(alt.prefix[static_cast<size_t>(i)], depth + 1)) {
      max = max < 0 ? i : std::min(max, i);
      break;
    }
  }
  if (!NonemptyAt(alt.items, depth + 1)) max = max < 0 ? k : std::min(max, k);
  const int64_t min = alt.min_items;
  // after[i]: the rest once i items are written (i <= prefix length).
  const int64_t last = std::min(k, max < 0 ? k : max);
  std::vector<Symbol> after(static_cast<size_t>(last) + 1);
  {
    // after[last]: items of `items` up to max, then the close.
    const int64_t i = last;
    const Symbol rule = builder_.Rule(absl::StrCat(where, ".items", i));
    const int64_t lo = std::max<int64_t>(0, min - i);
    const int64_t hi = max < 0 ? -1 : max - i;
    const std::string close_here = i == 0 ? "]" : close;
    if (hi == 0 || i < k) {
      builder_.Add(rule, {builder_.Literal(close_here)});
    } else {
      const Symbol item = EmitConj(alt.items, depth + 1);
      if (i == 0) {
        if (lo == 0) builder_.Add(rule, {builder_.Literal("]")});
        std::vector<Symbol> seq;
        if (!open.empty()) seq.push_back(builder_.Literal(open));
        seq.push_back(item);
        const Symbol next = builder_.Choice({{builder_.Literal(sep), item}}, absl::StrCat(where, ".next"));
        seq.push_back(builder_.Repeat(next, static_cast<int>(std::max<int64_t>(0, lo - 1)),
                                      hi < 0 ? -1 : static_cast<int>(hi - 1)));
        seq.push_back(builder_.Literal(close));
        builder_.Add(rule, std::move(seq));
      } else {
        const Symbol next = builder_.Choice({{builder_.Literal(sep), item}}, absl::StrCat(where, ".next"));
        builder_.Add(rule, {builder_.Repeat(next, static_cast<int>(lo), hi < 0 ? -1 : static_cast<int>(hi)),
                            builder_.Literal(close)});
      }
    }
    after[static_cast<size_t>(i)] = rule;
  }
  for (int64_t i = last; i-- > 0;) {
    const Symbol rule = builder_.Rule(absl::StrCat(where, ".items", i));
    if (i >= min) builder_.Add(rule, {builder_.Literal(i == 0 ? "]" : close)});
    std::vector<Symbol> seq;
    const std::string& lead = i == 0 ? open : sep;
    if (!lead.empty()) seq.push_back(builder_.Literal(lead));
    seq.push_back(EmitConj(alt.prefix[static_cast<size_t>(i)], depth + 1));
    seq.push_back(after[static_cast<size_t>(i) + 1]);
    builder_.Add(rule, std::move(seq));
    after[static_cast<size_t>(i)] = rule;
  }
  return {builder_.Literal("["), after[0]};
}

// Any JSON value at `level`: containers open only while level < max_nesting.
// The indented layout counts levels from the document's top (its whitespace
// depends on them); the compact one from where the unconstrained value starts.
Symbol Compiler::AnyValue(int level) {
  if (auto it = any_values_.find(level); it != any_values_.end()) return it->second;
  const std::string at = Indented() ? absl::StrCat("@", level) : absl::StrCat("#", level);
  const Symbol rule = builder_.Rule("any" + at);
  any_values_[level] = rule;
  builder_.Add(rule, {builder_.Literal("null")});
  builder_.Add(rule, {Term("true|false", "boolean")});
  builder_.Add(rule, {Term(kAnyNumberRegex, "number")});
  builder_.Add(rule, {Term(absl::StrCat("\"", SpellJsonContent(Re::Repeat(Re::Any(), 0, -1)), "\""), "string")});
  builder_.Add(rule, {AnyObject(level)});
  const Symbol array = builder_.Rule("any_array" + at);
  builder_.Add(array, {builder_.Literal("[]")});
  builder_.Add(rule, {array});
  pending_.emplace_back(-1, level, array);  // Drain adds the nonempty form
  return rule;
}

Symbol Compiler::AnyObject(int level) {
  if (auto it = any_objects_.find(level); it != any_objects_.end()) return it->second;
  const Symbol rule = builder_.Rule(absl::StrCat("any_object", Indented() ? "@" : "#", level));
  any_objects_[level] = rule;
  builder_.Add(rule, {builder_.Literal("{}")});
  pending_.emplace_back(-2, level, rule);  // Drain adds the nonempty form
  return rule;
}

absl::Status Compiler::Drain() {
  while (!pending_.empty()) {
    if (auto s = Tick(); !s.ok()) return s;
    if (builder_.size() > limits_.max_rules) {
      return absl::InvalidArgumentError(absl::StrCat("the schema needs more than ", limits_.max_rules,
                                                     " rules and terminals (CompileLimits::max_rules)"));
    }
    if (regex_bytes_ > limits_.max_memory_bytes / 8) {
      return absl::InvalidArgumentError(absl::StrCat("the schema's terminals exceed ", limits_.max_memory_bytes / 8,
                                                     " bytes of regex (CompileLimits::max_memory_bytes / 8)"));
    }
    auto [conj, depth, rule] = pending_.front();
    pending_.pop_front();
    if (conj >= 0) {
      if (auto s = FillConj(conj, depth, rule); !s.ok()) return s;
      continue;
    }
    // Any array (-1) / any object (-2): members one level deeper, within the bound.
    const int level = depth + 1;
    if (level > limits_.max_nesting) continue;
    const Symbol value = AnyValue(level);
    const std::string open = Indented() ? "\n" + Indent(level) : "";
    const std::string sep = Indented() ? ",\n" + Indent(level) : ",";
    const std::string close_char = conj == -1 ? "]" : "}";
    const std::string close = Indented() ? "\n" + Indent(depth) + close_char : close_char;
    if (conj == -1) {
      const Symbol next = builder_.Choice({{builder_.Literal(sep), value}}, "any_array.next");
      std::vector<Symbol> seq = {builder_.Literal("[")};
      if (!open.empty()) seq.push_back(builder_.Literal(open));
      seq.push_back(value);
      seq.push_back(builder_.Star(next));
      seq.push_back(builder_.Literal(close));
      builder_.Add(rule, std::move(seq));
    } else {
      const std::string colon = Indented() ? ": " : ":";
      const std::string key = absl::StrCat("\"", SpellJsonContent(Re::Repeat(Re::Any(), 0, -1)), "\"");
      const Symbol first_key = Term(absl::StrCat("\\{", RegexLiteral(open), key, RegexLiteral(colon)), "any_object.key");
      const Symbol next_key = Term(absl::StrCat(RegexLiteral(sep), key, RegexLiteral(colon)), "any_object.key");
      const Symbol next = builder_.Choice({{next_key, value}}, "any_object.next");
      builder_.Add(rule, {first_key, value, builder_.Star(next), builder_.Literal(close)});
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve::grammar::json_internal
