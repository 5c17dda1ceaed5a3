// GBNF text to GbnfAst: llama.cpp's grammar parser, rewritten. A rule ends at
// a newline outside parentheses (a following line that starts with '|'
// continues it); spaces, tabs and # comments separate elements; names are
// letters, digits, '-' and '_'.
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/ebnf_ast.h"

namespace tpserve::grammar::internal {
namespace {

constexpr int64_t kMaxCount = 1'000'000'000;

bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

class Parser {
 public:
  Parser(absl::string_view text, const CompileLimits& limits) : text_(text), limits_(limits) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<GbnfAst> Run() {
    SkipSpace(true);
    while (!AtEnd()) {
      TPSERVE_RETURN_IF_ERROR(ParseRule());
      SkipSpace(true);
    }
    for (const GbnfAst::Rule& rule : ast_.rules) {
      if (rule.body < 0) return ErrorAt(rule.line, rule.column, absl::StrCat("undefined rule '", rule.name, "'"));
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) return absl::InvalidArgumentError("grammar: no rule named 'root' (the start rule)");
    ast_.root = root->second;
    return std::move(ast_);
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  void LineColumn(size_t at, int& line, int& column) const {
    // line_starts_[k]: the offset where line k + 1 starts.
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
    line = static_cast<int>(it - line_starts_.begin());
    column = static_cast<int>(at - *(it - 1)) + 1;
  }
  static absl::Status ErrorAt(int line, int column, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: line ", line, ", column ", column, ": ", what));
  }
  absl::Status Error(absl::string_view what, size_t at) const {
    int line = 0, column = 0;
    LineColumn(at, line, column);
    return ErrorAt(line, column, what);
  }
  absl::Status Error(absl::string_view what) const { return Error(what, pos_); }

  // Adds a node; the tree's depth (groups, sequences, stacked quantifiers)
  // is bounded so that every recursive walk of it has bounded stack use.
  absl::StatusOr<int32_t> Add(GbnfNode node, size_t at) {
    int depth = 1;
    for (int32_t c : node.children) depth = std::max(depth, depth_[static_cast<size_t>(c)] + 1);
    if (depth > 4 * limits_.max_nesting + 16) {
      return Error(absl::StrCat("grammar nested deeper than the limit (CompileLimits::max_nesting = ",
                                limits_.max_nesting, ")"), at);
    }
    LineColumn(at, node.line, node.column);
    ast_.nodes.push_back(std::move(node));
    depth_.push_back(depth);
    return static_cast<int32_t>(ast_.nodes.size() - 1);
  }

  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n' && Peek() != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  int32_t RuleId(absl::string_view name, size_t at) {
    auto [it, inserted] = ids_.try_emplace(std::string(name), static_cast<int32_t>(ast_.rules.size()));
    if (inserted) {
      GbnfAst::Rule rule;
      rule.name = std::string(name);
      LineColumn(at, rule.line, rule.column);
      ast_.rules.push_back(std::move(rule));
    }
    return it->second;
  }

  absl::string_view ParseName() {
    const size_t begin = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return text_.substr(begin, pos_ - begin);
  }

  absl::Status ParseRule() {
    const size_t at = pos_;
    const absl::string_view name = ParseName();
    if (name.empty()) return Error("expected a rule name");
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") return Error(absl::StrCat("expected '::=' after '", name, "'"));
    pos_ += 3;
    SkipSpace(true);
    TPSERVE_ASSIGN_OR_RETURN(const int32_t body, ParseAlternates(0, at));
    SkipSpace(false);
    if (!AtEnd() && Peek() != '\n' && Peek() != '\r') {
      return Error(Peek() == ')' ? "unmatched ')'" : "expected a newline or the end of the grammar");
    }
    GbnfAst::Rule& rule = ast_.rules[static_cast<size_t>(RuleId(name, at))];
    if (rule.body >= 0) return Error(absl::StrCat("rule '", name, "' is defined twice"), at);
    rule.body = body;
    LineColumn(at, rule.line, rule.column);
    return absl::OkStatus();
  }

  // At the top level, a newline ends the rule unless the next line starts with '|'.
  bool ContinuesOnNextLine() {
    size_t p = pos_;
    while (p < text_.size()) {
      const char c = text_[p];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++p;
      } else if (c == '#') {
        while (p < text_.size() && text_[p] != '\n') ++p;
      } else {
        break;
      }
    }
    if (p < text_.size() && text_[p] == '|') {
      pos_ = p;
      return true;
    }
    return false;
  }

  absl::StatusOr<int32_t> ParseAlternates(int depth, size_t at) {
    GbnfNode alt;
    alt.kind = GbnfNode::Kind::kAlt;
    while (true) {
      TPSERVE_ASSIGN_OR_RETURN(const int32_t seq, ParseSequence(depth));
      alt.children.push_back(seq);
      SkipSpace(depth > 0);
      if (Peek() == '|' || (depth == 0 && ContinuesOnNextLine())) {
        ++pos_;
        SkipSpace(true);
        continue;
      }
      break;
    }
    if (alt.children.size() == 1) return alt.children[0];
    return Add(std::move(alt), at);
  }

  absl::StatusOr<int32_t> ParseSequence(int depth) {
    GbnfNode seq;
    seq.kind = GbnfNode::Kind::kSeq;
    const size_t at = pos_;
    while (true) {
      SkipSpace(depth > 0);
      const char c = Peek();
      if (AtEnd() || c == '|' || c == ')' || c == '\n' || c == '\r') break;
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (seq.children.empty()) return Error("nothing to repeat");
        TPSERVE_ASSIGN_OR_RETURN(seq.children.back(), ParseQuantifier(seq.children.back()));
        continue;
      }
      TPSERVE_ASSIGN_OR_RETURN(const int32_t element, ParsePrimary(depth));
      seq.children.push_back(element);
    }
    if (seq.children.size() == 1) return seq.children[0];
    return Add(std::move(seq), at);
  }

  absl::StatusOr<int64_t> ParseCount() {
    const size_t at = pos_;
    int64_t value = 0;
    while (!AtEnd() && absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
      value = std::min(value * 10 + (Peek() - '0'), kMaxCount + 1);
      ++pos_;
    }
    if (pos_ == at) return -1;
    if (value > kMaxCount) return Error(absl::StrCat("repetition count above ", kMaxCount), at);
    return value;
  }

  absl::StatusOr<int32_t> ParseQuantifier(int32_t element) {
    const size_t at = pos_;
    GbnfNode rep;
    rep.kind = GbnfNode::Kind::kRepeat;
    rep.children = {element};
    const char c = text_[pos_++];
    if (c == '*') {
      rep.min = 0, rep.max = -1;
    } else if (c == '+') {
      rep.min = 1, rep.max = -1;
    } else if (c == '?') {
      rep.min = 0, rep.max = 1;
    } else {
      SkipSpace(true);
      TPSERVE_ASSIGN_OR_RETURN(const int64_t min, ParseCount());
      SkipSpace(true);
      rep.min = std::max<int64_t>(min, 0);
      rep.max = rep.min;
      if (Peek() == ',') {
        ++pos_;
        SkipSpace(true);
        TPSERVE_ASSIGN_OR_RETURN(rep.max, ParseCount());
        SkipSpace(true);
      } else if (min < 0) {
        return Error("expected a count in '{...}'", at);
      }
      if (Peek() != '}') return Error("expected '}'", at);
      ++pos_;
      if (rep.max >= 0 && rep.max < rep.min) return Error("repetition {m,n} with n < m", at);
    }
    return Add(std::move(rep), at);
  }

  absl::StatusOr<int32_t> ParsePrimary(int depth) {
    const size_t at = pos_;
    const char c = Peek();
    if (c == '"') return ParseLiteral();
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      GbnfNode any;
      any.kind = GbnfNode::Kind::kClass;
      any.ranges = {{0, kMaxCodepoint}};
      return Add(std::move(any), at);
    }
    if (c == '(') {
      if (depth + 1 > limits_.max_nesting) {
        return Error(absl::StrCat("parentheses nested deeper than ", limits_.max_nesting,
                                  " (CompileLimits::max_nesting)"));
      }
      ++pos_;
      SkipSpace(true);
      TPSERVE_ASSIGN_OR_RETURN(const int32_t inner, ParseAlternates(depth + 1, at));
      SkipSpace(true);
      if (Peek() != ')') return Error("missing ')'", at);
      ++pos_;
      return inner;
    }
    if (IsNameChar(c)) {
      const absl::string_view name = ParseName();
      GbnfNode ref;
      ref.kind = GbnfNode::Kind::kRef;
      ref.rule = RuleId(name, at);
      return Add(std::move(ref), at);
    }
    if (c == '<') return Error("token references <...> are not supported");
    return Error(absl::StrCat("unexpected character '", absl::CEscape(text_.substr(pos_, 1)), "'"));
  }

  // One character of a literal or class at pos_ (escapes decoded).
  absl::StatusOr<uint32_t> ParseChar() {
    const size_t at = pos_;
    if (Peek() != '\\') {
      uint32_t cp = 0;
      const int len = DecodeUtf8(text_.data() + pos_, text_.size() - pos_, cp);
      if (len == 0) return Error("invalid UTF-8");
      pos_ += static_cast<size_t>(len);
      return cp;
    }
    ++pos_;
    const char c = Peek();
    ++pos_;
    size_t digits = 0;
    switch (c) {
      case 'n': return uint32_t{'\n'};
      case 't': return uint32_t{'\t'};
      case 'r': return uint32_t{'\r'};
      case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(c);
      case 'x': digits = 2; break;
      case 'u': digits = 4; break;
      case 'U': digits = 8; break;
      default: return Error("unknown escape", at);
    }
    uint32_t cp = 0;
    for (size_t i = 0; i < digits; ++i, ++pos_) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(Peek()))) return Error("bad hex escape", at);
      const auto h = static_cast<unsigned char>(absl::ascii_tolower(static_cast<unsigned char>(Peek())));
      cp = cp * 16 + static_cast<uint32_t>(absl::ascii_isdigit(h) ? h - '0' : h - 'a' + 10);
    }
    if (cp > kMaxCodepoint) return Error("code point above U+10FFFF", at);
    return cp;
  }

  absl::StatusOr<int32_t> ParseLiteral() {
    const size_t at = pos_++;
    GbnfNode lit;
    lit.kind = GbnfNode::Kind::kLiteral;
    while (Peek() != '"') {
      if (AtEnd() || Peek() == '\n') return Error("unterminated string literal", at);
      TPSERVE_ASSIGN_OR_RETURN(const uint32_t cp, ParseChar());
      AppendUtf8(cp, lit.bytes);
    }
    ++pos_;
    return Add(std::move(lit), at);
  }

  absl::StatusOr<int32_t> ParseClass() {
    const size_t at = pos_++;
    const bool negate = Peek() == '^';
    if (negate) ++pos_;
    CodepointRanges set;
    while (Peek() != ']') {
      if (AtEnd()) return Error("unterminated character class", at);
      TPSERVE_ASSIGN_OR_RETURN(const uint32_t lo, ParseChar());
      uint32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        TPSERVE_ASSIGN_OR_RETURN(hi, ParseChar());
        if (hi < lo) return Error("character range out of order", at);
      }
      set.emplace_back(lo, hi);
    }
    ++pos_;
    GbnfNode cls;
    cls.kind = GbnfNode::Kind::kClass;
    cls.ranges = Normalize(std::move(set));
    if (negate) cls.ranges = Complement(cls.ranges);
    return Add(std::move(cls), at);
  }

  absl::string_view text_;
  const CompileLimits& limits_;
  size_t pos_ = 0;
  std::vector<size_t> line_starts_;
  std::vector<int> depth_;  // [nodes] depth of each node's subtree
  GbnfAst ast_;
  absl::flat_hash_map<std::string, int32_t> ids_;
};

}  // namespace

absl::StatusOr<GbnfAst> ParseGbnfAst(absl::string_view text, const CompileLimits& limits) {
  if (text.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: ", text.size(), " bytes, more than the limit of ",
                                                   limits.max_spec_bytes, " (CompileLimits::max_spec_bytes)"));
  }
  return Parser(text, limits).Run();
}

}  // namespace tpserve::grammar::internal
