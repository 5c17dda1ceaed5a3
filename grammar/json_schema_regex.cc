// ECMA-262 patterns and formats as code point languages, and their spelling
// as regexes over JSON string text (json_schema_regex.h).
#include "grammar/json_schema_regex.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace tpserve::grammar::json_internal {
namespace {

using internal::AppendUtf8;
using internal::Complement;
using internal::Normalize;

constexpr int kMaxPatternDepth = 200;          // groups nested in a pattern
constexpr int64_t kMaxQuantifier = 1'000'000;  // {n,m} bounds

CodepointRanges Intersect(const CodepointRanges& a, const CodepointRanges& b) {
  CodepointRanges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint32_t lo = std::max(a[i].first, b[j].first);
    const uint32_t hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

CodepointRanges Subtract(const CodepointRanges& a, const CodepointRanges& b) { return Intersect(a, Complement(b)); }

bool Contains(const CodepointRanges& set, uint32_t cp) {
  auto it = std::upper_bound(set.begin(), set.end(), cp, [](uint32_t v, const auto& r) { return v < r.first; });
  return it != set.begin() && std::prev(it)->second >= cp;
}

const CodepointRanges& DigitSet() {
  static const CodepointRanges set = {{'0', '9'}};
  return set;
}
const CodepointRanges& WordSet() {
  static const CodepointRanges set = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return set;
}
// ECMA-262 WhiteSpace and LineTerminator.
const CodepointRanges& SpaceSet() {
  static const CodepointRanges set = Normalize({{0x09, 0x0D},
                                                {0x20, 0x20},
                                                {0xA0, 0xA0},
                                                {0x1680, 0x1680},
                                                {0x2000, 0x200A},
                                                {0x2028, 0x2029},
                                                {0x202F, 0x202F},
                                                {0x205F, 0x205F},
                                                {0x3000, 0x3000},
                                                {0xFEFF, 0xFEFF}});
  return set;
}
// `.` without the s flag: anything but a line terminator.
const CodepointRanges& DotSet() {
  static const CodepointRanges set = Complement({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}});
  return set;
}
// Characters a JSON string holds as themselves.
const CodepointRanges& RawSet() {
  static const CodepointRanges set = Complement({{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}});
  return set;
}

// ---- the ECMA-262 pattern parser ----

class PatternParser {
 public:
  explicit PatternParser(std::u32string p) : p_(std::move(p)) {}

  absl::StatusOr<Re> ParseTop() {
    std::vector<Re> alternatives;
    while (true) {
      bool anchored_start = false, anchored_end = false;
      if (Peek('^')) {
        anchored_start = true;
        ++i_;
      }
      auto body = ParseSequence(/*top=*/true, &anchored_end);
      if (!body.ok()) return body.status();
      std::vector<Re> parts;
      if (!anchored_start) parts.push_back(Re::Repeat(Re::Any(), 0, -1));
      parts.push_back(*std::move(body));
      if (!anchored_end) parts.push_back(Re::Repeat(Re::Any(), 0, -1));
      alternatives.push_back(Re::Concat(std::move(parts)));
      if (i_ >= p_.size()) break;
      if (p_[i_] == '|') {
        ++i_;
        continue;
      }
      return Error("unmatched )");
    }
    return Re::Alt(std::move(alternatives));
  }

 private:
  bool Peek(char32_t c) const { return i_ < p_.size() && p_[i_] == c; }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at offset ", i_));
  }

  // A sequence of quantified atoms up to | or ) or the end. At the top level a
  // final $ anchors the alternative.
  absl::StatusOr<Re> ParseSequence(bool top, bool* anchored_end) {
    std::vector<Re> items;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      const char32_t c = p_[i_];
      if (c == '^') return Error("^ not at the start of a top-level alternative is not supported");
      if (c == '$') {
        if (top && (i_ + 1 == p_.size() || p_[i_ + 1] == '|')) {
          *anchored_end = true;
          ++i_;
          break;
        }
        return Error("$ not at the end of a top-level alternative is not supported");
      }
      auto atom = ParseAtom();
      if (!atom.ok()) return atom.status();
      Re re = *std::move(atom);
      while (true) {
        auto q = ParseQuantifier();
        if (!q.ok()) return q.status();
        if (!q->has_value()) break;
        re = Re::Repeat(std::move(re), (*q)->first, (*q)->second);
      }
      items.push_back(std::move(re));
    }
    return Re::Concat(std::move(items));
  }

  absl::StatusOr<Re> ParseDisjunction() {
    std::vector<Re> alternatives;
    while (true) {
      bool unused = false;
      auto seq = ParseSequence(/*top=*/false, &unused);
      if (!seq.ok()) return seq.status();
      alternatives.push_back(*std::move(seq));
      if (!Peek('|')) break;
      ++i_;
    }
    return Re::Alt(std::move(alternatives));
  }

  // nullopt when no quantifier follows.
  absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> ParseQuantifier() {
    if (i_ >= p_.size()) return std::nullopt;
    std::pair<int64_t, int64_t> q;
    const char32_t c = p_[i_];
    if (c == '*') {
      q = {0, -1};
      ++i_;
    } else if (c == '+') {
      q = {1, -1};
      ++i_;
    } else if (c == '?') {
      q = {0, 1};
      ++i_;
    } else if (c == '{') {
      size_t j = i_ + 1;
      auto number = [&](int64_t* out) {
        const size_t start = j;
        int64_t v = 0;
        while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
          v = std::min<int64_t>(v * 10 + (p_[j] - '0'), kMaxQuantifier + 1);
          ++j;
        }
        *out = v;
        return j > start;
      };
      int64_t lo = 0, hi = 0;
      if (!number(&lo)) return std::nullopt;  // a literal {
      if (j < p_.size() && p_[j] == '}') {
        hi = lo;
      } else if (j < p_.size() && p_[j] == ',') {
        ++j;
        if (!number(&hi)) hi = -1;
        if (j >= p_.size() || p_[j] != '}') return std::nullopt;
      } else {
        return std::nullopt;
      }
      i_ = j + 1;
      if (lo > kMaxQuantifier || hi > kMaxQuantifier) return Error("a quantifier bound above 1000000");
      if (hi >= 0 && hi < lo) return Error("a quantifier {n,m} with m < n");
      q = {lo, hi};
    } else {
      return std::nullopt;
    }
    if (Peek('?')) ++i_;  // lazy: the same language
    return std::optional<std::pair<int64_t, int64_t>>(q);
  }

  absl::StatusOr<Re> ParseAtom() {
    const char32_t c = p_[i_];
    switch (c) {
      case '(': {
        ++i_;
        if (Peek('?')) {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
            i_ += 2;
          } else if (i_ + 1 < p_.size() && p_[i_ + 1] == '<' && i_ + 2 < p_.size() && p_[i_ + 2] != '=' &&
                     p_[i_ + 2] != '!') {
            const size_t close = p_.find('>', i_);
            if (close == std::u32string::npos) return Error("an unterminated group name");
            i_ = close + 1;
          } else {
            return Error("lookaround ((?=, (?!, (?<=, (?<!) is not supported");
          }
        }
        if (++depth_ > kMaxPatternDepth) return Error("groups nested too deeply");
        auto inner = ParseDisjunction();
        if (!inner.ok()) return inner.status();
        --depth_;
        if (!Peek(')')) return Error("an unterminated group");
        ++i_;
        return inner;
      }
      case '[':
        return ParseClass();
      case '.':
        ++i_;
        return Re::Set(DotSet());
      case '\\': {
        ++i_;
        auto set = ParseEscape(/*in_class=*/false);
        if (!set.ok()) return set.status();
        return Re::Set(*std::move(set));
      }
      case '*':
      case '+':
      case '?':
        return Error("a quantifier with nothing to repeat");
      default:
        ++i_;
        return Re::Char(c);
    }
  }

  absl::StatusOr<uint32_t> Hex(size_t digits) {
    if (i_ + digits > p_.size()) return Error("a truncated hex escape");
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char32_t h = p_[i_ + k];
      int d = -1;
      if (h >= '0' && h <= '9') d = static_cast<int>(h - '0');
      if (h >= 'a' && h <= 'f') d = static_cast<int>(h - 'a' + 10);
      if (h >= 'A' && h <= 'F') d = static_cast<int>(h - 'A' + 10);
      if (d < 0) return Error("a bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    i_ += digits;
    return v;
  }

  // After a backslash and "u": {X...} or XXXX in hex (a surrogate pair of two
  // such escapes is one code point; a lone surrogate, which no string holds,
  // is the empty set).
  absl::StatusOr<CodepointRanges> ParseUnicodeEscape() {
    if (Peek('{')) {
      const size_t close = p_.find('}', i_);
      if (close == std::u32string::npos || close == i_ + 1 || close - i_ - 1 > 6) return Error("a bad \\u{...}");
      ++i_;
      auto v = Hex(close - i_);
      if (!v.ok()) return v.status();
      ++i_;
      if (*v > internal::kMaxCodepoint) return Error("a code point above U+10FFFF");
      return CodepointRanges{{*v, *v}};
    }
    auto v = Hex(4);
    if (!v.ok()) return v.status();
    uint32_t cp = *v;
    if (cp >= 0xD800 && cp <= 0xDBFF && i_ + 6 <= p_.size() && p_[i_] == '\\' && p_[i_ + 1] == 'u') {
      const size_t save = i_;
      i_ += 2;
      auto low = Hex(4);
      if (low.ok() && *low >= 0xDC00 && *low <= 0xDFFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (*low - 0xDC00);
      } else {
        i_ = save;
      }
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return CodepointRanges{};
    return CodepointRanges{{cp, cp}};
  }

  // After a backslash: the set the escape stands for.
  absl::StatusOr<CodepointRanges> ParseEscape(bool in_class) {
    if (i_ >= p_.size()) return Error("a pattern ending in a backslash");
    const char32_t c = p_[i_++];
    auto one = [](uint32_t cp) { return CodepointRanges{{cp, cp}}; };
    switch (c) {
      case 'd':
        return DigitSet();
      case 'D':
        return Complement(DigitSet());
      case 'w':
        return WordSet();
      case 'W':
        return Complement(WordSet());
      case 's':
        return SpaceSet();
      case 'S':
        return Complement(SpaceSet());
      case 't':
        return one(0x09);
      case 'n':
        return one(0x0A);
      case 'v':
        return one(0x0B);
      case 'f':
        return one(0x0C);
      case 'r':
        return one(0x0D);
      case 'b':
        if (in_class) return one(0x08);
        return Error("\\b (a word boundary) is not supported");
      case 'B':
        return Error("\\B (a word boundary) is not supported");
      case '0':
        if (Peek('0') || (i_ < p_.size() && p_[i_] >= '1' && p_[i_] <= '9')) {
          return Error("octal escapes are not supported");
        }
        return one(0);
      case 'c':
        if (i_ < p_.size() && ((p_[i_] >= 'a' && p_[i_] <= 'z') || (p_[i_] >= 'A' && p_[i_] <= 'Z'))) {
          return one(static_cast<uint32_t>(p_[i_++]) % 32);
        }
        return Error("a bad \\c escape");
      case 'x': {
        auto v = Hex(2);
        if (!v.ok()) return v.status();
        return one(*v);
      }
      case 'u':
        return ParseUnicodeEscape();
      case 'k':
        return Error("named backreferences are not supported");
      case 'p':
      case 'P':
        return Error("Unicode property escapes (\\p{...}) are not supported");
      default:
        if (c >= '1' && c <= '9') return Error("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          return Error("an unknown escape");
        }
        return one(c);  // identity escape
    }
  }

  absl::StatusOr<Re> ParseClass() {
    ++i_;  // [
    bool negated = false;
    if (Peek('^')) {
      negated = true;
      ++i_;
    }
    CodepointRanges members;
    // One class atom: a single code point (returned) or a set (added, nullopt).
    auto atom = [&]() -> absl::StatusOr<std::optional<uint32_t>> {
      if (p_[i_] == '\\') {
        ++i_;
        const size_t at = i_;
        auto set = ParseEscape(/*in_class=*/true);
        if (!set.ok()) return set.status();
        const bool shorthand = at < p_.size() && std::u32string_view(U"dDwWsS").find(p_[at]) != std::u32string_view::npos;
        if (!shorthand && set->size() == 1 && set->front().first == set->front().second) {
          return std::optional<uint32_t>(set->front().first);
        }
        if (!shorthand && set->empty()) return std::optional<uint32_t>(0xD800);  // a lone surrogate
        members.insert(members.end(), set->begin(), set->end());
        return std::optional<uint32_t>();
      }
      return std::optional<uint32_t>(static_cast<uint32_t>(p_[i_++]));
    };
    while (true) {
      if (i_ >= p_.size()) return Error("an unterminated character class");
      if (p_[i_] == ']') {
        ++i_;
        break;
      }
      auto lo = atom();
      if (!lo.ok()) return lo.status();
      if (lo->has_value() && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        auto hi = atom();
        if (!hi.ok()) return hi.status();
        if (!hi->has_value()) return Error("a class range ending in a class escape");
        if (**hi < **lo) return Error("a class range out of order");
        members.emplace_back(**lo, **hi);
      } else if (lo->has_value()) {
        members.emplace_back(**lo, **lo);
      }
    }
    CodepointRanges set = Intersect(Normalize(std::move(members)), AllScalars());
    if (negated) set = Complement(set);
    return Re::Set(std::move(set));
  }

  std::u32string p_;
  size_t i_ = 0;
  int depth_ = 0;
};

// ---- spelling as JSON string text ----

// `cp` in a regex of regex.h's dialect, inside a class or not.
void AppendRegexChar(uint32_t cp, bool in_class, std::string& out) {
  if (cp < 0x20 || cp == 0x7F) {
    absl::StrAppendFormat(&out, "\\x%02X", cp);
  } else if (cp < 0x80) {
    const absl::string_view meta = in_class ? "\\]^-[" : "\\.^$|?*+()[]{}";
    if (meta.find(static_cast<char>(cp)) != absl::string_view::npos) out += '\\';
    out += static_cast<char>(cp);
  } else {
    AppendUtf8(cp, out);
  }
}

void AppendClassRanges(const CodepointRanges& set, std::string& out) {
  for (const auto& [lo, hi] : set) {
    AppendRegexChar(lo, true, out);
    if (hi == lo) continue;
    if (hi > lo + 1) out += '-';
    AppendRegexChar(hi, true, out);
  }
}

// The escape sequences (as regex alternatives) of the code points in `set`
// that JSON text cannot hold as themselves.
std::vector<std::string> EscapeAlternatives(const CodepointRanges& set) {
  std::vector<std::string> out;
  std::string short_class;  // letters after a backslash
  auto short_form = [](uint32_t cp) -> char {
    switch (cp) {
      case 0x08:
        return 'b';
      case 0x09:
        return 't';
      case 0x0A:
        return 'n';
      case 0x0C:
        return 'f';
      case 0x0D:
        return 'r';
      case '"':
        return '"';
      case '\\':
        return '\\';
      default:
        return 0;
    }
  };
  std::string low, high;  // hex digit after \u000 and \u001
  for (uint32_t cp : {0x08u, 0x09u, 0x0Au, 0x0Cu, 0x0Du, static_cast<uint32_t>('"'), static_cast<uint32_t>('\\')}) {
    if (Contains(set, cp)) short_class += short_form(cp);
  }
  for (uint32_t cp = 0; cp < 0x20; ++cp) {
    if (short_form(cp) != 0 || !Contains(set, cp)) continue;
    (cp < 0x10 ? low : high) += "0123456789abcdef"[cp & 0xF];
  }
  if (!short_class.empty()) {
    std::string alt = "\\\\";
    if (short_class.size() == 1) {
      AppendRegexChar(static_cast<unsigned char>(short_class[0]), false, alt);
    } else {
      alt += '[';
      for (char c : short_class) AppendRegexChar(static_cast<unsigned char>(c), true, alt);
      alt += ']';
    }
    out.push_back(std::move(alt));
  }
  auto digits = [](const std::string& d) { return d.size() == 1 ? d : absl::StrCat("[", d, "]"); };
  if (!low.empty() && !high.empty()) {
    out.push_back(absl::StrCat("\\\\u00(?:0", digits(low), "|1", digits(high), ")"));
  } else if (!low.empty()) {
    out.push_back(absl::StrCat("\\\\u000", digits(low)));
  } else if (!high.empty()) {
    out.push_back(absl::StrCat("\\\\u001", digits(high)));
  }
  return out;
}

struct Spelled {
  std::string text;
  bool atomic = false;  // can take a quantifier as it is
};

Spelled SpellSet(const CodepointRanges& set) {
  const CodepointRanges raw = Intersect(set, RawSet());
  std::vector<std::string> parts;
  bool atomic = true;
  if (!raw.empty()) {
    std::string cls;
    const CodepointRanges missing = Subtract(RawSet(), raw);
    if (raw.size() == 1 && raw[0].first == raw[0].second) {
      AppendRegexChar(raw[0].first, false, cls);
    } else if (missing.size() < raw.size()) {
      cls = "[^\\x00-\\x1F\"\\\\";
      AppendClassRanges(missing, cls);
      cls += ']';
    } else {
      cls = "[";
      AppendClassRanges(raw, cls);
      cls += ']';
    }
    parts.push_back(std::move(cls));
  }
  for (std::string& e : EscapeAlternatives(set)) {
    parts.push_back(std::move(e));
    atomic = false;
  }
  if (parts.size() == 1) return {parts[0], atomic};
  std::string text = "(?:";
  for (size_t k = 0; k < parts.size(); ++k) absl::StrAppend(&text, k ? "|" : "", parts[k]);
  return {text + ")", true};
}

Spelled Spell(const Re& re);

std::string Group(const Spelled& s) { return s.atomic ? s.text : absl::StrCat("(?:", s.text, ")"); }

Spelled Spell(const Re& re) {
  switch (re.kind) {
    case Re::Kind::kEmpty:
      return {"", false};
    case Re::Kind::kSet:
      return SpellSet(re.set);
    case Re::Kind::kConcat: {
      std::string text;
      for (const Re& kid : re.kids) {
        Spelled s = Spell(kid);
        text += kid.kind == Re::Kind::kAlt ? Group(s) : s.text;
      }
      return {text, false};
    }
    case Re::Kind::kAlt: {
      std::vector<std::string> parts;
      bool optional = false;
      for (const Re& kid : re.kids) {
        if (IsEmptyLanguage(kid)) continue;
        Spelled s = Spell(kid);
        if (s.text.empty()) {
          optional = true;
        } else {
          parts.push_back(std::move(s.text));
        }
      }
      std::string text;
      for (size_t k = 0; k < parts.size(); ++k) absl::StrAppend(&text, k ? "|" : "", parts[k]);
      if (optional && !parts.empty()) return {absl::StrCat("(?:", text, ")?"), false};
      return {text, false};
    }
    case Re::Kind::kRepeat: {
      if (IsEmptyLanguage(re.kids[0])) return {"", false};  // min is 0: only ""
      Spelled kid = Spell(re.kids[0]);
      if (kid.text.empty()) return {"", false};
      std::string q;
      if (re.min == 0 && re.max < 0) {
        q = "*";
      } else if (re.min == 1 && re.max < 0) {
        q = "+";
      } else if (re.min == 0 && re.max == 1) {
        q = "?";
      } else if (re.max < 0) {
        q = absl::StrCat("{", re.min, ",}");
      } else if (re.min == re.max) {
        if (re.min == 1) return kid;
        q = absl::StrCat("{", re.min, "}");
      } else {
        q = absl::StrCat("{", re.min, ",", re.max, "}");
      }
      return {Group(kid) + q, false};
    }
  }
  return {"", false};
}

// ---- matching (enum values against patterns and formats) ----

using Positions = std::vector<char>;  // [n+1]: 1 where a match may stand

Positions Step(const Re& re, const Positions& from, std::u32string_view v) {
  const size_t n = v.size();
  switch (re.kind) {
    case Re::Kind::kEmpty:
      return from;
    case Re::Kind::kSet: {
      Positions out(n + 1, 0);
      for (size_t i = 0; i < n; ++i) {
        if (from[i] && Contains(re.set, v[i])) out[i + 1] = 1;
      }
      return out;
    }
    case Re::Kind::kConcat: {
      Positions cur = from;
      for (const Re& kid : re.kids) cur = Step(kid, cur, v);
      return cur;
    }
    case Re::Kind::kAlt: {
      Positions out(n + 1, 0);
      for (const Re& kid : re.kids) {
        Positions p = Step(kid, from, v);
        for (size_t i = 0; i <= n; ++i) out[i] |= p[i];
      }
      return out;
    }
    case Re::Kind::kRepeat: {
      Positions cur = from;
      for (int64_t k = 0; k < re.min; ++k) {
        Positions next = Step(re.kids[0], cur, v);
        if (next == cur) break;  // a fixed point: more rounds change nothing
        cur = std::move(next);
      }
      Positions result = cur, frontier = cur;
      for (int64_t k = re.min; re.max < 0 || k < re.max; ++k) {
        Positions next = Step(re.kids[0], frontier, v);
        bool grew = false;
        for (size_t i = 0; i <= n; ++i) {
          if (next[i] && !result[i]) {
            result[i] = 1;
            grew = true;
          }
        }
        if (!grew) break;
        frontier = std::move(next);
      }
      return result;
    }
  }
  return Positions(n + 1, 0);
}

struct TrieNode {
  bool terminal = false;
  std::map<uint32_t, std::unique_ptr<TrieNode>> kids;
};

// The strings over `alphabet` that are not in the trie below `node`.
Re TrieComplement(const TrieNode& node, const CodepointRanges& alphabet) {
  std::vector<Re> alternatives;
  if (!node.terminal) alternatives.push_back(Re::Empty());
  CodepointRanges taken;
  for (const auto& [cp, kid] : node.kids) {
    alternatives.push_back(Re::Concat({Re::Char(cp), TrieComplement(*kid, alphabet)}));
    taken.emplace_back(cp, cp);
  }
  alternatives.push_back(
      Re::Concat({Re::Set(Subtract(alphabet, Normalize(taken))), Re::Repeat(Re::Set(alphabet), 0, -1)}));
  return Re::Alt(std::move(alternatives));
}

// The formats, as patterns (parsed once by FormatLanguage).
constexpr char kDatePattern[] =
    "(?:\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|"
    "02-(?:0[1-9]|1\\d|2[0-8]))|(?:\\d{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)";
constexpr char kTimePattern[] = "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
constexpr char kHex4[] = "[0-9a-fA-F]{1,4}";
constexpr char kPchar[] = "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
constexpr char kRegName[] = "(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*";
constexpr char kUserInfo[] = "(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|%[0-9A-Fa-f]{2})*@)?";

std::string UriPieces(bool reference) {
  const std::string pchar = kPchar;
  const std::string path_abempty = absl::StrCat("(?:/", pchar, "*)*");
  const std::string authority = absl::StrCat("//", kUserInfo, kRegName, "(?::\\d*)?", path_abempty);
  const std::string path_absolute = absl::StrCat("/(?:", pchar, "+", path_abempty, ")?");
  const std::string path_rootless = absl::StrCat(pchar, "+", path_abempty);
  const std::string tail = absl::StrCat("(?:\\?(?:", pchar, "|[/?])*)?(?:#(?:", pchar, "|[/?])*)?");
  const std::string uri =
      absl::StrCat("[A-Za-z][A-Za-z0-9+.-]*:(?:", authority, "|", path_absolute, "|", path_rootless, ")", tail);
  if (!reference) return uri;
  const std::string segment_nc = "(?:[A-Za-z0-9._~!$&'()*+,;=@-]|%[0-9A-Fa-f]{2})+";
  const std::string relative =
      absl::StrCat("(?:", authority, "|", path_absolute, "|", segment_nc, path_abempty, ")?", tail);
  return absl::StrCat("(?:", uri, "|", relative, ")");
}

std::string Ipv6Pattern() {
  const std::string h = kHex4;
  return absl::StrCat("(?:(?:", h, ":){7}", h, "|(?:", h, ":){1,7}:|(?:", h, ":){1,6}:", h, "|(?:", h, ":){1,5}(?::",
                      h, "){1,2}|(?:", h, ":){1,4}(?::", h, "){1,3}|(?:", h, ":){1,3}(?::", h, "){1,4}|(?:", h,
                      ":){1,2}(?::", h, "){1,5}|", h, ":(?::", h, "){1,6}|:(?:(?::", h, "){1,7}|:))");
}

}  // namespace

Re Re::Set(CodepointRanges set) {
  Re re;
  re.kind = Kind::kSet;
  re.set = Intersect(Normalize(std::move(set)), AllScalars());
  return re;
}

Re Re::Concat(std::vector<Re> kids) {
  Re re;
  re.kind = Kind::kConcat;
  for (Re& kid : kids) {
    if (kid.kind == Kind::kEmpty) continue;
    if (kid.kind == Kind::kConcat) {
      for (Re& k : kid.kids) re.kids.push_back(std::move(k));
    } else {
      re.kids.push_back(std::move(kid));
    }
  }
  if (re.kids.empty()) return Empty();
  if (re.kids.size() == 1) return std::move(re.kids[0]);
  return re;
}

Re Re::Alt(std::vector<Re> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Re re;
  re.kind = Kind::kAlt;
  re.kids = std::move(kids);
  return re;
}

Re Re::Repeat(Re kid, int64_t min, int64_t max) {
  if (kid.kind == Kind::kEmpty || max == 0) return Empty();
  if (min == 1 && max == 1) return kid;
  Re re;
  re.kind = Kind::kRepeat;
  re.min = min;
  re.max = max;
  re.kids.push_back(std::move(kid));
  return re;
}

Re Re::Literal(std::u32string_view s) {
  std::vector<Re> kids;
  for (char32_t c : s) kids.push_back(Char(c));
  return Concat(std::move(kids));
}

Re Re::Any() { return Set(AllScalars()); }

CodepointRanges AllScalars() {
  static const CodepointRanges all = Complement({});
  return all;
}

std::u32string DecodeUtf8(absl::string_view s) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    const int n = internal::DecodeUtf8(s.data() + i, s.size() - i, cp);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

absl::StatusOr<Re> ParseEcmaPattern(absl::string_view pattern) {
  PatternParser parser(DecodeUtf8(pattern));
  return parser.ParseTop();
}

std::optional<Re> FormatLanguage(absl::string_view format) {
  static const auto* table = [] {
    auto* t = new std::map<std::string, Re, std::less<>>();
    const std::string label63 = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    const std::string ipv4_octet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    const std::map<std::string, std::string> patterns = {
        {"date", absl::StrCat("^", kDatePattern, "$")},
        {"time", absl::StrCat("^", kTimePattern, "$")},
        {"date-time", absl::StrCat("^", kDatePattern, "T", kTimePattern, "$")},
        {"email", absl::StrCat("^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:", label63,
                               "\\.)+", label63, "$")},
        {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
        {"ipv4", absl::StrCat("^(?:", ipv4_octet, "\\.){3}", ipv4_octet, "$")},
        {"ipv6", absl::StrCat("^", Ipv6Pattern(), "$")},
        // At most 253 characters: a first label of up to 63, then up to six of up to 30.
        {"hostname", absl::StrCat("^", label63, "(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,28}[A-Za-z0-9])?){0,6}$")},
        {"uri", absl::StrCat("^", UriPieces(false), "$")},
        {"uri-reference", absl::StrCat("^", UriPieces(true), "$")},
        {"json-pointer", "^(?:/(?:[^~/]|~[01])*)*$"},
        {"byte", "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"},
    };
    for (const auto& [name, pattern] : patterns) {
      auto re = ParseEcmaPattern(pattern);
      if (re.ok()) t->emplace(name, *std::move(re));
    }
    return t;
  }();
  auto it = table->find(format);
  if (it == table->end()) return std::nullopt;
  return it->second;
}

LengthRange Lengths(const Re& re) {
  switch (re.kind) {
    case Re::Kind::kEmpty:
      return {0, 0};
    case Re::Kind::kSet:
      return {1, 1};
    case Re::Kind::kConcat: {
      LengthRange out{0, 0};
      for (const Re& kid : re.kids) {
        if (IsEmptyLanguage(kid)) continue;
        const LengthRange l = Lengths(kid);
        out.min += l.min;
        out.max = (out.max < 0 || l.max < 0) ? -1 : out.max + l.max;
      }
      return out;
    }
    case Re::Kind::kAlt: {
      LengthRange out{INT64_MAX, 0};
      for (const Re& kid : re.kids) {
        if (IsEmptyLanguage(kid)) continue;
        const LengthRange l = Lengths(kid);
        out.min = std::min(out.min, l.min);
        out.max = (out.max < 0 || l.max < 0) ? -1 : std::max(out.max, l.max);
      }
      if (out.min == INT64_MAX) out.min = 0;
      return out;
    }
    case Re::Kind::kRepeat: {
      const LengthRange l = Lengths(re.kids[0]);
      LengthRange out;
      out.min = std::min<int64_t>(re.min * l.min, INT64_MAX / 4);
      if (l.max == 0) {
        out.max = 0;
      } else if (re.max < 0 || l.max < 0) {
        out.max = -1;
      } else {
        out.max = std::min<int64_t>(re.max * l.max, INT64_MAX / 4);
      }
      return out;
    }
  }
  return {};
}

bool IsEmptyLanguage(const Re& re) {
  switch (re.kind) {
    case Re::Kind::kEmpty:
      return false;
    case Re::Kind::kSet:
      return re.set.empty();
    case Re::Kind::kConcat:
      return std::any_of(re.kids.begin(), re.kids.end(), [](const Re& k) { return IsEmptyLanguage(k); });
    case Re::Kind::kAlt:
      return std::all_of(re.kids.begin(), re.kids.end(), [](const Re& k) { return IsEmptyLanguage(k); });
    case Re::Kind::kRepeat:
      return re.min > 0 && IsEmptyLanguage(re.kids[0]);
  }
  return false;
}

std::optional<Re> WithLength(const Re& re, int64_t min, int64_t max) {
  if (IsEmptyLanguage(re)) return re;
  const LengthRange l = Lengths(re);
  if (l.min >= min && (max < 0 || (l.max >= 0 && l.max <= max))) return re;
  const Re nothing = Re::Set({});
  if (max >= 0 && (min > max || l.min > max)) return nothing;
  if (l.max >= 0 && l.max < min) return nothing;
  switch (re.kind) {
    case Re::Kind::kEmpty:
    case Re::Kind::kSet:
      return nothing;  // fixed lengths, outside the bounds
    case Re::Kind::kRepeat: {
      const Re& kid = re.kids[0];
      if (re.min == 0 && re.max == 1) {  // X? is "" | X
        std::vector<Re> kids;
        if (min == 0) kids.push_back(Re::Empty());
        auto k = WithLength(kid, min, max);
        if (!k) return std::nullopt;
        kids.push_back(*std::move(k));
        return Re::Alt(std::move(kids));
      }
      const LengthRange k = Lengths(kid);
      if (k.min != k.max || k.min == 0) return std::nullopt;  // only fixed-width units
      const int64_t w = k.min;
      const int64_t lo = std::max(re.min, (min + w - 1) / w);
      int64_t hi = max < 0 ? re.max : max / w;
      if (re.max >= 0 && hi >= 0) hi = std::min(hi, re.max);
      if (hi >= 0 && lo > hi) return nothing;
      return Re::Repeat(kid, lo, hi);
    }
    case Re::Kind::kAlt: {
      std::vector<Re> kids;
      for (const Re& kid : re.kids) {
        auto k = WithLength(kid, min, max);
        if (!k) return std::nullopt;
        kids.push_back(*std::move(k));
      }
      return Re::Alt(std::move(kids));
    }
    case Re::Kind::kConcat: {
      int variable = -1;
      int64_t fixed = 0;
      for (size_t i = 0; i < re.kids.size(); ++i) {
        const LengthRange k = Lengths(re.kids[i]);
        if (k.min == k.max) {
          fixed += k.min;
        } else if (variable >= 0) {
          return std::nullopt;  // two variable parts
        } else {
          variable = static_cast<int>(i);
        }
      }
      if (variable < 0) return nothing;
      auto part = WithLength(re.kids[static_cast<size_t>(variable)], std::max<int64_t>(0, min - fixed),
                             max < 0 ? -1 : max - fixed);
      if (!part) return std::nullopt;
      std::vector<Re> kids = re.kids;
      kids[static_cast<size_t>(variable)] = *std::move(part);
      return Re::Concat(std::move(kids));
    }
  }
  return std::nullopt;
}

bool Matches(const Re& re, std::u32string_view value) {
  Positions start(value.size() + 1, 0);
  start[0] = 1;
  return Step(re, start, value)[value.size()] != 0;
}

Re AnyStringExcept(const std::vector<std::u32string>& excluded) {
  // When no excluded string holds a character JSON escapes, the strings that
  // hold one are all in; the trie is then over the other characters only, so
  // its spelling does not repeat the escapes at every node.
  const bool plain = std::all_of(excluded.begin(), excluded.end(), [](const std::u32string& s) {
    return std::all_of(s.begin(), s.end(), [](char32_t c) { return Contains(RawSet(), c); });
  });
  TrieNode root;
  for (const std::u32string& s : excluded) {
    TrieNode* node = &root;
    for (char32_t c : s) {
      auto& kid = node->kids[c];
      if (!kid) kid = std::make_unique<TrieNode>();
      node = kid.get();
    }
    node->terminal = true;
  }
  if (!plain) return TrieComplement(root, AllScalars());
  const Re escaped = Re::Concat({Re::Repeat(Re::Set(RawSet()), 0, -1), Re::Set(Complement(RawSet())),
                                 Re::Repeat(Re::Any(), 0, -1)});
  return Re::Alt({TrieComplement(root, RawSet()), escaped});
}

std::string SpellJsonContent(const Re& re) {
  Spelled s = Spell(re);
  return re.kind == Re::Kind::kAlt ? Group(s) : s.text;
}

std::string RegexLiteral(absl::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x80) {
      out += static_cast<char>(c);
    } else {
      AppendRegexChar(c, false, out);
    }
  }
  return out;
}

}  // namespace tpserve::grammar::json_internal
