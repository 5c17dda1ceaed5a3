// Recursive descent over regex.h's dialect into RegexAst. Group nesting and
// the tree's depth are bounded by kMaxRegexDepth; errors name the construct
// and its byte offset. A class's ']' right after '[' or '[^' is a literal
// (as in PCRE and Python); '{' that does not start a valid count is a literal.
#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/regex_ast.h"

namespace tpserve::grammar::internal {
namespace {

constexpr int64_t kMaxCount = 1'000'000'000;

CodepointRanges Digits() { return {{'0', '9'}}; }
CodepointRanges WordChars() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
// ECMA-262's WhiteSpace and LineTerminator.
CodepointRanges Spaces() {
  return Normalize({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<RegexAst> Run() {
    TPSERVE_ASSIGN_OR_RETURN(const int32_t root, ParseAlt(0));
    if (pos_ < text_.size()) return Error("unmatched ')'");
    ast_.root = root;
    return std::move(ast_);
  }

 private:
  struct ClassAtom {
    CodepointRanges set;
    bool single = false;  // one character: may be a range endpoint
  };

  absl::Status Error(absl::string_view what, size_t at) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: ", what, " at offset ", at));
  }
  absl::Status Error(absl::string_view what) const { return Error(what, pos_); }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  absl::StatusOr<int32_t> Add(RegexNode node) {
    int depth = 1;
    for (int32_t c : node.children) depth = std::max(depth, depth_[static_cast<size_t>(c)] + 1);
    if (depth > kMaxRegexDepth) return Error(absl::StrCat("nesting deeper than ", kMaxRegexDepth));
    ast_.nodes.push_back(std::move(node));
    depth_.push_back(depth);
    return static_cast<int32_t>(ast_.nodes.size() - 1);
  }
  absl::StatusOr<int32_t> AddSet(CodepointRanges set) {
    RegexNode n;
    n.kind = RegexNode::Kind::kCodepoints;
    n.ranges = std::move(set);
    return Add(std::move(n));
  }

  absl::StatusOr<int32_t> ParseAlt(int depth) {
    RegexNode alt;
    alt.kind = RegexNode::Kind::kAlt;
    while (true) {
      TPSERVE_ASSIGN_OR_RETURN(const int32_t seq, ParseConcat(depth));
      alt.children.push_back(seq);
      if (Peek() != '|') break;
      ++pos_;
    }
    if (alt.children.size() == 1) return alt.children[0];
    return Add(std::move(alt));
  }

  absl::StatusOr<int32_t> ParseConcat(int depth) {
    RegexNode seq;
    seq.kind = RegexNode::Kind::kConcat;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '^') {
        if (depth != 0 || !seq.children.empty()) return Error("'^' not at the start of the expression");
        ++pos_;
        continue;
      }
      if (Peek() == '$') {
        if (depth != 0 || (pos_ + 1 < text_.size() && text_[pos_ + 1] != '|')) {
          return Error("'$' not at the end of the expression");
        }
        ++pos_;
        continue;
      }
      TPSERVE_ASSIGN_OR_RETURN(const int32_t atom, ParseQuantified(depth));
      seq.children.push_back(atom);
    }
    if (seq.children.size() == 1) return seq.children[0];
    if (seq.children.empty()) return Add(RegexNode{});
    return Add(std::move(seq));
  }

  // {n}, {n,}, {n,m}, {,m} at pos_; false (pos_ unchanged) when not a count.
  absl::StatusOr<bool> ParseCount(int64_t& min, int64_t& max) {
    size_t p = pos_ + 1;
    auto number = [&](int64_t& out) {
      const size_t begin = p;
      out = 0;
      while (p < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[p]))) {
        out = std::min<int64_t>(out * 10 + (text_[p] - '0'), kMaxCount + 1);
        ++p;
      }
      return p > begin;
    };
    const bool has_min = number(min);
    if (!has_min) min = 0;
    max = min;
    if (p < text_.size() && text_[p] == ',') {
      ++p;
      if (!number(max)) max = -1;
      if (!has_min && max < 0) return false;  // "{,}" is text
    } else if (!has_min) {
      return false;
    }
    if (p >= text_.size() || text_[p] != '}') return false;
    if (min > kMaxCount || max > kMaxCount) return Error(absl::StrCat("repetition count above ", kMaxCount));
    if (max >= 0 && max < min) return Error("repetition {min,max} with max < min");
    pos_ = p + 1;
    return true;
  }

  absl::StatusOr<int32_t> ParseQuantified(int depth) {
    if (Peek() == '*' || Peek() == '+' || Peek() == '?') return Error("nothing to repeat");
    if (Peek() == '{') {
      int64_t min = 0, max = 0;
      const size_t save = pos_;
      TPSERVE_ASSIGN_OR_RETURN(const bool is_count, ParseCount(min, max));
      if (is_count) return Error("nothing to repeat", save);
    }
    TPSERVE_ASSIGN_OR_RETURN(int32_t atom, ParseAtom(depth));
    while (!AtEnd()) {
      int64_t min = 0, max = -1;
      const char c = Peek();
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_, min = 1;
      } else if (c == '?') {
        ++pos_, max = 1;
      } else if (c == '{') {
        TPSERVE_ASSIGN_OR_RETURN(const bool is_count, ParseCount(min, max));
        if (!is_count) break;
      } else {
        break;
      }
      if (Peek() == '+') return Error("possessive quantifier");
      if (Peek() == '?') ++pos_;  // lazy: the same strings match
      RegexNode rep;
      rep.kind = RegexNode::Kind::kRepeat;
      rep.children = {atom};
      rep.min = min;
      rep.max = max;
      TPSERVE_ASSIGN_OR_RETURN(atom, Add(std::move(rep)));
    }
    return atom;
  }

  absl::StatusOr<int32_t> ParseGroup(int depth) {
    const size_t open = pos_;
    ++pos_;
    if (Peek() == '?') {
      const absl::string_view rest = text_.substr(pos_);
      if (absl::StartsWith(rest, "?:")) {
        pos_ += 2;
      } else if (absl::StartsWith(rest, "?=") || absl::StartsWith(rest, "?!") || absl::StartsWith(rest, "?<=") ||
                 absl::StartsWith(rest, "?<!")) {
        return Error("lookaround assertion is not supported", open);
      } else if (absl::StartsWith(rest, "?P=")) {
        return Error("backreference is not supported", open);
      } else if (absl::StartsWith(rest, "?<") || absl::StartsWith(rest, "?P<")) {
        const size_t close = text_.find('>', pos_);
        if (close == absl::string_view::npos) return Error("unterminated group name", open);
        pos_ = close + 1;
      } else {
        return Error("group construct (?...) is not supported (inline flags, comments, ...)", open);
      }
    }
    if (depth + 1 > kMaxRegexDepth) return Error(absl::StrCat("groups nested deeper than ", kMaxRegexDepth), open);
    TPSERVE_ASSIGN_OR_RETURN(const int32_t inner, ParseAlt(depth + 1));
    if (Peek() != ')') return Error("missing ')'", open);
    ++pos_;
    return inner;
  }

  absl::StatusOr<int32_t> ParseAtom(int depth) {
    const char c = Peek();
    if (c == '(') return ParseGroup(depth);
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return AddSet({{0, '\n' - 1}, {'\n' + 1, kMaxCodepoint}});
    }
    if (c == '\\') {
      TPSERVE_ASSIGN_OR_RETURN(ClassAtom atom, ParseEscape(/*in_class=*/false));
      return AddSet(std::move(atom.set));
    }
    uint32_t cp = 0;
    const int len = DecodeUtf8(text_.data() + pos_, text_.size() - pos_, cp);
    if (len == 0) {  // a byte that starts no UTF-8 sequence stands for itself
      RegexNode n;
      n.kind = RegexNode::Kind::kByte;
      const auto b = static_cast<uint8_t>(text_[pos_++]);
      n.ranges = {{b, b}};
      return Add(std::move(n));
    }
    pos_ += static_cast<size_t>(len);
    return AddSet({{cp, cp}});
  }

  absl::StatusOr<uint32_t> ParseHex(size_t digits, size_t at) {
    if (pos_ + digits > text_.size()) return Error("truncated hex escape", at);
    uint32_t value = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char h = text_[pos_ + i];
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(h))) return Error("bad hex escape", at);
      value = value * 16 + static_cast<uint32_t>(absl::ascii_isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : absl::ascii_tolower(static_cast<unsigned char>(h)) - 'a' + 10);
    }
    pos_ += digits;
    if (value > kMaxCodepoint) return Error("code point above U+10FFFF", at);
    return value;
  }

  absl::StatusOr<ClassAtom> Char(uint32_t cp) { return ClassAtom{{{cp, cp}}, true}; }

  // pos_ at '\\'.
  absl::StatusOr<ClassAtom> ParseEscape(bool in_class) {
    const size_t at = pos_;
    ++pos_;
    if (AtEnd()) return Error("trailing backslash", at);
    const char c = text_[pos_++];
    switch (c) {
      case 'd': return ClassAtom{Digits()};
      case 'D': return ClassAtom{Complement(Digits())};
      case 'w': return ClassAtom{WordChars()};
      case 'W': return ClassAtom{Complement(WordChars())};
      case 's': return ClassAtom{Spaces()};
      case 'S': return ClassAtom{Complement(Spaces())};
      case 'n': return Char('\n');
      case 't': return Char('\t');
      case 'r': return Char('\r');
      case 'f': return Char('\f');
      case 'v': return Char('\v');
      case '0':
        if (absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) return Error("octal escape is not supported", at);
        return Char(0);
      case 'x': {
        TPSERVE_ASSIGN_OR_RETURN(const uint32_t cp, ParseHex(2, at));
        return Char(cp);
      }
      case 'u': {
        if (Peek() == '{') {
          const size_t close = text_.find('}', pos_);
          if (close == absl::string_view::npos || close == pos_ + 1 || close - pos_ - 1 > 6) {
            return Error("bad \\u{...} escape", at);
          }
          ++pos_;
          TPSERVE_ASSIGN_OR_RETURN(const uint32_t cp, ParseHex(close - pos_, at));
          ++pos_;
          return Char(cp);
        }
        TPSERVE_ASSIGN_OR_RETURN(const uint32_t cp, ParseHex(4, at));
        return Char(cp);
      }
      case 'U': {
        TPSERVE_ASSIGN_OR_RETURN(const uint32_t cp, ParseHex(8, at));
        return Char(cp);
      }
      case 'b':
        if (in_class) return Char('\b');
        return Error("word boundary \\b is not supported", at);
      case 'B': case 'A': case 'Z': case 'z': case 'G':
        return Error(absl::StrCat("anchor \\", std::string(1, c), " is not supported"), at);
      case 'k':
        return Error("backreference is not supported", at);
      case 'p': case 'P':
        return Error("Unicode property escape is not supported", at);
      case 'c':
        return Error("control escape \\c is not supported", at);
      default:
        break;
    }
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) return Error("backreference is not supported", at);
    if (absl::ascii_isalpha(static_cast<unsigned char>(c))) {
      return Error(absl::StrCat("unknown escape \\", std::string(1, c)), at);
    }
    --pos_;  // any other character escapes itself
    uint32_t cp = 0;
    const int len = DecodeUtf8(text_.data() + pos_, text_.size() - pos_, cp);
    if (len == 0) return Error("invalid UTF-8 after '\\'", at);
    pos_ += static_cast<size_t>(len);
    return Char(cp);
  }

  absl::StatusOr<ClassAtom> ParseClassAtom() {
    if (Peek() == '\\') return ParseEscape(/*in_class=*/true);
    uint32_t cp = 0;
    const int len = DecodeUtf8(text_.data() + pos_, text_.size() - pos_, cp);
    if (len == 0) return Error("invalid UTF-8 in a character class");
    pos_ += static_cast<size_t>(len);
    return Char(cp);
  }

  absl::StatusOr<int32_t> ParseClass() {
    const size_t open = pos_++;
    const bool negate = Peek() == '^';
    if (negate) ++pos_;
    CodepointRanges set;
    for (bool first = true;; first = false) {
      if (AtEnd()) return Error("unterminated character class", open);
      if (Peek() == ']' && !first) {
        ++pos_;
        break;
      }
      const size_t at = pos_;
      TPSERVE_ASSIGN_OR_RETURN(ClassAtom lo, ParseClassAtom());
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        TPSERVE_ASSIGN_OR_RETURN(ClassAtom hi, ParseClassAtom());
        if (!lo.single || !hi.single) return Error("bad character range", at);
        if (lo.set[0].first > hi.set[0].first) return Error("character range out of order", at);
        set.emplace_back(lo.set[0].first, hi.set[0].first);
        continue;
      }
      set.insert(set.end(), lo.set.begin(), lo.set.end());
    }
    set = Normalize(std::move(set));
    return AddSet(negate ? Complement(set) : std::move(set));
  }

  absl::string_view text_;
  size_t pos_ = 0;
  RegexAst ast_;
  std::vector<int> depth_;  // [nodes] tree depth of each node
};

}  // namespace

absl::StatusOr<RegexAst> ParseRegex(absl::string_view regex) { return Parser(regex).Run(); }

}  // namespace tpserve::grammar::internal
