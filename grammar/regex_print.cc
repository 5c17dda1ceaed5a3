// CanonicalRegex: a RegexAst subtree back to regex.h's dialect, every class
// as \u{...} ranges and every compound part in (?:...), so equal trees print equal.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grammar/regex_ast.h"

namespace tpserve::grammar::internal {

std::string CanonicalRegex(const RegexAst& ast, int32_t node) {
  const RegexNode& n = ast.nodes[static_cast<size_t>(node)];
  std::string out;
  switch (n.kind) {
    case RegexNode::Kind::kEmpty:
      return "(?:)";
    case RegexNode::Kind::kCodepoints:
      if (n.ranges.empty()) return "[^\\u{0}-\\u{10FFFF}]";
      out = "[";
      for (const auto& [lo, hi] : n.ranges) {
        absl::StrAppendFormat(&out, "\\u{%X}", lo);
        if (hi != lo) absl::StrAppendFormat(&out, "-\\u{%X}", hi);
      }
      return out + "]";
    case RegexNode::Kind::kByte:  // raw bytes stand for themselves (regex.h)
      out = "(?:";
      for (uint32_t b = n.ranges[0].first; b <= n.ranges[0].second; ++b) {
        if (b > n.ranges[0].first) out += "|";
        out += static_cast<char>(b);
      }
      return out + ")";
    case RegexNode::Kind::kConcat:
      out = "(?:";
      for (int32_t c : n.children) out += CanonicalRegex(ast, c);
      return out + ")";
    case RegexNode::Kind::kAlt:
      out = "(?:";
      for (size_t i = 0; i < n.children.size(); ++i) absl::StrAppend(&out, i > 0 ? "|" : "", CanonicalRegex(ast, n.children[i]));
      return out + ")";
    case RegexNode::Kind::kRepeat:
      return absl::StrCat("(?:", CanonicalRegex(ast, n.children[0]), "){", n.min, ",", n.max < 0 ? "" : absl::StrCat(n.max), "}");
  }
  return out;
}

}  // namespace tpserve::grammar::internal
