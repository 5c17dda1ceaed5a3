// The parsed form of a regex in regex.h's dialect (internal to the grammar
// engine): a tree of code point sets, raw bytes, concatenation, alternation
// and counted repetition, stored in one vector (children by index).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grammar/utf8_ranges.h"

namespace tpserve::grammar::internal {

struct RegexNode {
  enum class Kind : uint8_t {
    kEmpty,       // matches ""
    kCodepoints,  // one character of `ranges`, as UTF-8 (empty ranges: matches nothing)
    kByte,        // one byte in [ranges[0].first, ranges[0].second] (<= 0xFF)
    kConcat,      // children in order
    kAlt,         // any child
    kRepeat,      // children[0] repeated min..max times (max < 0: unbounded)
  };
  Kind kind = Kind::kEmpty;
  CodepointRanges ranges;
  std::vector<int32_t> children;
  int64_t min = 0;
  int64_t max = -1;
};

struct RegexAst {
  std::vector<RegexNode> nodes;  // [n]; children point at lower or higher indices freely
  int32_t root = 0;
};

// Bound on the parse tree's depth (groups and stacked quantifiers), so that
// everything that walks the tree recursively has bounded stack use.
inline constexpr int kMaxRegexDepth = 400;

// Parses `regex`; INVALID_ARGUMENT naming the construct and its byte offset.
absl::StatusOr<RegexAst> ParseRegex(absl::string_view regex);

// The subtree at `node` written back as a regex in one spelling: two subtrees
// with the same language structure get the same text.
std::string CanonicalRegex(const RegexAst& ast, int32_t node);

}  // namespace tpserve::grammar::internal
