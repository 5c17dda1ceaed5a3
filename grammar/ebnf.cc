// GBNF to the IR (ParseGbnf): the text is parsed (ebnf_parser.cc), then
//   * rules that are not recursive and reference only such rules are regular:
//     each becomes one regex, inlined where it is used when it is small;
//   * every other rule becomes an IR rule, with each run of regular elements
//     in a sequence merged into one terminal, groups into new rules, and
//     repetitions of non-regular parts through GrammarBuilder's shorthands.
// So `object ::= "{" ws (pair ("," ws pair)*)? "}"` gets the terminals
// /\{[ \t\n]*/ and /,[ \t\n]*/ and `string ::= ...` one terminal.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "grammar/ebnf.h"
#include "grammar/ebnf_ast.h"
#include "grammar/regex.h"
#include "grammar/scc.h"

namespace tpserve::grammar {
namespace {

using internal::GbnfAst;
using internal::GbnfNode;

constexpr size_t kInlineBytes = 4096;        // a regular rule's regex inlined where used up to this size
constexpr size_t kTerminalBytes = 64 << 10;  // a regular rule is one terminal up to this size

void AppendClassChar(uint32_t cp, std::string& out) {
  if (cp >= 0x20 && cp < 0x7F && cp != '\\' && cp != ']' && cp != '[' && cp != '^' && cp != '-') {
    out += static_cast<char>(cp);
  } else {
    absl::StrAppendFormat(&out, "\\u{%X}", cp);
  }
}

std::string ClassRegex(const internal::CodepointRanges& ranges) {
  if (ranges.empty()) return "[^\\u{0}-\\u{10FFFF}]";
  std::string out = "[";
  for (const auto& [lo, hi] : ranges) {
    AppendClassChar(lo, out);
    if (hi != lo) {
      out += '-';
      AppendClassChar(hi, out);
    }
  }
  return out + "]";
}

class Lowering {
 public:
  Lowering(const GbnfAst& ast, const CompileLimits& limits)
      : ast_(ast), limits_(limits), deadline_(absl::Now() + limits.max_time),
        regex_(ast.rules.size()), terminal_(ast.rules.size(), 0), inline_(ast.rules.size(), 0),
        regular_(ast.nodes.size(), -1), symbol_(ast.rules.size()) {}

  absl::StatusOr<Grammar> Run() {
    TPSERVE_RETURN_IF_ERROR(ClassifyRules());
    for (size_t r = 0; r < ast_.rules.size(); ++r) symbol_[r] = builder_.Rule(ast_.rules[r].name);
    for (size_t r = 0; r < ast_.rules.size(); ++r) {
      if (absl::Now() > deadline_) return TimeError();
      rule_name_ = ast_.rules[r].name;
      if (terminal_[r]) {
        builder_.Add(symbol_[r], {Terminal(regex_[r], absl::StrCat("<", rule_name_, ">"))});
        continue;
      }
      TPSERVE_ASSIGN_OR_RETURN(auto alternatives, LowerAlternatives(ast_.rules[r].body));
      for (auto& alternative : alternatives) builder_.Add(symbol_[r], std::move(alternative));
    }
    return std::move(builder_).Build(symbol_[static_cast<size_t>(ast_.root)], limits_);
  }

 private:
  static absl::Status TimeError() {
    return absl::InvalidArgumentError("grammar: compiling took longer than the limit (CompileLimits::max_time)");
  }

  void References(int32_t node, std::vector<int32_t>& out) const {
    const GbnfNode& n = ast_.nodes[static_cast<size_t>(node)];
    if (n.kind == GbnfNode::Kind::kRef) out.push_back(n.rule);
    for (int32_t c : n.children) References(c, out);
  }

  // Which rules are one terminal (regex_ set) and which are inlined.
  absl::Status ClassifyRules() {
    std::vector<std::vector<int32_t>> edges(ast_.rules.size());
    for (size_t r = 0; r < ast_.rules.size(); ++r) References(ast_.rules[r].body, edges[r]);
    for (const std::vector<int32_t>& component : internal::StronglyConnectedComponents(edges)) {
      if (absl::Now() > deadline_) return TimeError();
      const auto r = static_cast<size_t>(component[0]);
      if (component.size() > 1 || std::find(edges[r].begin(), edges[r].end(), component[0]) != edges[r].end()) {
        continue;  // recursive
      }
      bool inlinable_refs = true;
      for (int32_t ref : edges[r]) inlinable_refs = inlinable_refs && inline_[static_cast<size_t>(ref)];
      if (!inlinable_refs) continue;
      std::string regex;
      if (!RegexOf(ast_.rules[r].body, regex)) continue;
      terminal_[r] = 1;
      inline_[r] = regex.size() <= kInlineBytes;
      regex_[r] = std::move(regex);
    }
    return absl::OkStatus();
  }

  // Appends the regex of a regular node; false past kTerminalBytes.
  bool RegexOf(int32_t node, std::string& out) const {
    const GbnfNode& n = ast_.nodes[static_cast<size_t>(node)];
    switch (n.kind) {
      case GbnfNode::Kind::kLiteral: out += EscapeRegexLiteral(n.bytes); break;
      case GbnfNode::Kind::kClass: out += ClassRegex(n.ranges); break;
      case GbnfNode::Kind::kRef: absl::StrAppend(&out, "(?:", regex_[static_cast<size_t>(n.rule)], ")"); break;
      case GbnfNode::Kind::kSeq:
        for (int32_t c : n.children) {
          if (!RegexOf(c, out)) return false;
        }
        break;
      case GbnfNode::Kind::kAlt:
        out += "(?:";
        for (size_t i = 0; i < n.children.size(); ++i) {
          if (i > 0) out += "|";
          if (!RegexOf(n.children[i], out)) return false;
        }
        out += ")";
        break;
      case GbnfNode::Kind::kRepeat:
        out += "(?:";
        if (!RegexOf(n.children[0], out)) return false;
        out += ")";
        if (n.max < 0) {
          out += n.min == 0 ? "*" : n.min == 1 ? "+" : absl::StrCat("{", n.min, ",}");
        } else {
          out += n.min == 0 && n.max == 1 ? "?" : n.min == n.max ? absl::StrCat("{", n.min, "}")
                                                                  : absl::StrCat("{", n.min, ",", n.max, "}");
        }
        break;
    }
    return out.size() <= kTerminalBytes;
  }

  // No reference under `node` to a rule that is not inlined.
  bool Regular(int32_t node) {
    int8_t& memo = regular_[static_cast<size_t>(node)];
    if (memo >= 0) return memo != 0;
    const GbnfNode& n = ast_.nodes[static_cast<size_t>(node)];
    bool regular = n.kind != GbnfNode::Kind::kRef || inline_[static_cast<size_t>(n.rule)];
    for (int32_t c : n.children) regular = Regular(c) && regular;
    memo = regular ? 1 : 0;
    return regular;
  }

  // Named after its regex when short, else after the rule it is in.
  Symbol Terminal(const std::string& regex, const std::string& name = "") {
    if (!name.empty()) return builder_.Terminal(regex, name);
    return builder_.Terminal(regex, regex.size() <= 40 ? absl::StrCat("/", regex, "/")
                                                       : absl::StrCat(rule_name_, "#", builder_.size()));
  }

  absl::StatusOr<std::vector<std::vector<Symbol>>> LowerAlternatives(int32_t node) {
    const GbnfNode& n = ast_.nodes[static_cast<size_t>(node)];
    std::vector<std::vector<Symbol>> out;
    if (n.kind != GbnfNode::Kind::kAlt) {
      TPSERVE_ASSIGN_OR_RETURN(out.emplace_back(), LowerSequence(node));
      return out;
    }
    for (int32_t c : n.children) {
      TPSERVE_ASSIGN_OR_RETURN(out.emplace_back(), LowerSequence(c));
    }
    return out;
  }

  absl::StatusOr<std::vector<Symbol>> LowerSequence(int32_t node) {
    const GbnfNode& n = ast_.nodes[static_cast<size_t>(node)];
    const std::vector<int32_t> single = {node};
    const std::vector<int32_t>& elements = n.kind == GbnfNode::Kind::kSeq ? n.children : single;
    std::vector<Symbol> out;
    std::string run;  // regex of the regular elements since the last symbol
    auto flush = [&] {
      if (!run.empty()) out.push_back(Terminal(run));
      run.clear();
    };
    for (int32_t e : elements) {
      if (absl::Now() > deadline_) return TimeError();
      std::string piece;
      if (Regular(e) && RegexOf(e, piece)) {
        if (run.size() + piece.size() > kInlineBytes) flush();
        run += piece;
        if (run.size() > kInlineBytes) flush();
        continue;
      }
      flush();
      TPSERVE_ASSIGN_OR_RETURN(const Symbol s, SymbolOf(e));
      out.push_back(s);
    }
    flush();
    return out;
  }

  // One symbol for element `node`.
  absl::StatusOr<Symbol> SymbolOf(int32_t node) {
    const GbnfNode& n = ast_.nodes[static_cast<size_t>(node)];
    if (n.kind == GbnfNode::Kind::kRef) return symbol_[static_cast<size_t>(n.rule)];
    if (Regular(node)) {
      std::string regex;
      const bool leaf = n.kind == GbnfNode::Kind::kLiteral || n.kind == GbnfNode::Kind::kClass;
      if (RegexOf(node, regex) || leaf) return Terminal(regex);
    }
    if (n.kind == GbnfNode::Kind::kRepeat) {
      TPSERVE_ASSIGN_OR_RETURN(const Symbol s, SymbolOf(n.children[0]));
      if (n.min == 0 && n.max == 1) return builder_.Optional(s);
      if (n.min == 0 && n.max < 0) return builder_.Star(s);
      if (n.min == 1 && n.max < 0) return builder_.Plus(s);
      return builder_.Repeat(s, static_cast<int>(n.min), static_cast<int>(n.max));
    }
    TPSERVE_ASSIGN_OR_RETURN(auto alternatives, LowerAlternatives(node));
    return builder_.Choice(std::move(alternatives));
  }

  const GbnfAst& ast_;
  const CompileLimits& limits_;
  const absl::Time deadline_;
  std::vector<std::string> regex_;   // [rules] the regex of a rule that is one terminal
  std::vector<uint8_t> terminal_;    // [rules] the rule is one terminal
  std::vector<uint8_t> inline_;      // [rules] ... and small enough to inline where used
  std::vector<int8_t> regular_;      // [nodes] memo of Regular, -1 unknown
  std::vector<Symbol> symbol_;       // [rules] the IR rule
  std::string rule_name_;            // the rule being lowered (names its terminals)
  GrammarBuilder builder_;
};

}  // namespace

absl::StatusOr<Grammar> ParseGbnf(absl::string_view text, const CompileLimits& limits) {
  TPSERVE_ASSIGN_OR_RETURN(const GbnfAst ast, internal::ParseGbnfAst(text, limits));
  return Lowering(ast, limits).Run();
}

}  // namespace tpserve::grammar
