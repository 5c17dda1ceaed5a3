// GBNF text parsed, before it becomes the IR (internal to the grammar
// engine): each rule's body as a tree, with the line and column of every
// node for the errors of the lowering (ebnf.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grammar/spec.h"
#include "grammar/utf8_ranges.h"

namespace tpserve::grammar::internal {

struct GbnfNode {
  enum class Kind : uint8_t {
    kAlt,      // children: alternatives
    kSeq,      // children in order (none: "")
    kRepeat,   // children[0], min..max times (max < 0: unbounded)
    kLiteral,  // `bytes` (UTF-8)
    kClass,    // one character of `ranges` (already negated if [^...])
    kRef,      // rule `rule`
  };
  Kind kind = Kind::kSeq;
  std::vector<int32_t> children;
  std::string bytes;
  CodepointRanges ranges;
  int64_t min = 0, max = -1;
  int32_t rule = -1;
  int line = 0, column = 0;
};

struct GbnfAst {
  struct Rule {
    std::string name;
    int32_t body = -1;  // node; -1 while only referenced
    int line = 0, column = 0;  // of the definition, or of the first reference
  };
  std::vector<GbnfNode> nodes;
  std::vector<Rule> rules;
  int32_t root = -1;  // the rule named "root"
};

// Parses GBNF text; INVALID_ARGUMENT with "line L, column C: what". Checks
// nesting against limits.max_nesting, every reference against a definition,
// and that `root` exists.
absl::StatusOr<GbnfAst> ParseGbnfAst(absl::string_view text, const CompileLimits& limits);

}  // namespace tpserve::grammar::internal
