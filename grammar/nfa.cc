// RegexAst to a byte NFA: Thompson's construction with counted repetition
// spelled out (x{2,4} = x x (x (x)?)?), every character class as the
// alternation of its UTF-8 byte sequences. The state count is checked as it
// grows, so (a{1000}){1000} fails after max_states states, not 10^6.
#include "grammar/nfa.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve::grammar::internal {
namespace {

class Builder {
 public:
  Builder(const RegexAst& ast, int64_t max_states, absl::Time deadline, int32_t star_node)
      : ast_(ast), max_states_(max_states), deadline_(deadline), star_node_(star_node) {}

  absl::StatusOr<Nfa> Run() {
    nfa_.start = NewState();
    TPSERVE_ASSIGN_OR_RETURN(nfa_.accept, Build(ast_.root, nfa_.start));
    TPSERVE_RETURN_IF_ERROR(status_);
    return std::move(nfa_);
  }

 private:
  int32_t NewState() {
    nfa_.first_arc.push_back(-1);
    if (nfa_.num_states() > max_states_ && status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat("regex needs more than ", max_states_,
                                                        " automaton states (CompileLimits::max_automaton_states)"));
    }
    if ((nfa_.num_states() & 0xFFF) == 0 && absl::Now() > deadline_ && status_.ok()) {
      status_ = absl::InvalidArgumentError("regex compile took longer than the limit (CompileLimits::max_time)");
    }
    return nfa_.num_states() - 1;
  }
  void AddArc(int32_t from, Nfa::Arc arc) {
    arc.next = nfa_.first_arc[static_cast<size_t>(from)];
    nfa_.first_arc[static_cast<size_t>(from)] = static_cast<int32_t>(nfa_.arcs.size());
    nfa_.arcs.push_back(arc);
  }
  void Epsilon(int32_t from, int32_t to) { AddArc(from, {.to = to, .epsilon = true}); }
  void Bytes(int32_t from, int32_t to, uint8_t lo, uint8_t hi) { AddArc(from, {.to = to, .lo = lo, .hi = hi}); }

  // Adds the automaton of node `id` starting at `from`; returns its end state.
  absl::StatusOr<int32_t> Build(int32_t id, int32_t from) {
    TPSERVE_RETURN_IF_ERROR(status_);
    const RegexNode& node = ast_.nodes[static_cast<size_t>(id)];
    switch (node.kind) {
      case RegexNode::Kind::kEmpty:
        return from;
      case RegexNode::Kind::kByte: {
        const int32_t to = NewState();
        Bytes(from, to, static_cast<uint8_t>(node.ranges[0].first), static_cast<uint8_t>(node.ranges[0].second));
        return to;
      }
      case RegexNode::Kind::kCodepoints:
        return BuildCodepoints(node, from);
      case RegexNode::Kind::kConcat: {
        int32_t at = from;
        for (int32_t child : node.children) {
          TPSERVE_ASSIGN_OR_RETURN(at, Build(child, at));
        }
        return at;
      }
      case RegexNode::Kind::kAlt: {
        const int32_t to = NewState();
        for (int32_t child : node.children) {
          const int32_t begin = NewState();
          Epsilon(from, begin);
          TPSERVE_ASSIGN_OR_RETURN(const int32_t end, Build(child, begin));
          Epsilon(end, to);
        }
        return to;
      }
      case RegexNode::Kind::kRepeat:
        if (id == star_node_) return BuildStar(node.children[0], from, /*mark=*/true);
        return BuildRepeat(node, from);
    }
    return from;
  }

  absl::StatusOr<int32_t> BuildCodepoints(const RegexNode& node, int32_t from) {
    const int32_t to = NewState();
    for (const ByteSequence& seq : Utf8Sequences(node.ranges)) {
      int32_t at = from;
      for (int k = 0; k < seq.length; ++k) {
        const int32_t next = k + 1 == seq.length ? to : NewState();
        Bytes(at, next, seq.lo[k], seq.hi[k]);
        at = next;
      }
    }
    TPSERVE_RETURN_IF_ERROR(status_);
    return to;
  }

  // x*: a loop through a fresh state.
  absl::StatusOr<int32_t> BuildStar(int32_t child, int32_t at, bool mark) {
    const int32_t loop = NewState();
    if (mark) nfa_.marked = loop;
    Epsilon(at, loop);
    TPSERVE_ASSIGN_OR_RETURN(const int32_t end, Build(child, loop));
    Epsilon(end, loop);
    return loop;
  }

  absl::StatusOr<int32_t> BuildRepeat(const RegexNode& node, int32_t from) {
    const int32_t child = node.children[0];
    int32_t at = from;
    for (int64_t i = 0; i < node.min; ++i) {
      TPSERVE_ASSIGN_OR_RETURN(at, Build(child, at));
    }
    if (node.max < 0) return BuildStar(child, at, /*mark=*/false);
    const int32_t to = NewState();
    Epsilon(at, to);
    for (int64_t i = node.min; i < node.max; ++i) {  // each further copy may be skipped to the end
      TPSERVE_ASSIGN_OR_RETURN(at, Build(child, at));
      Epsilon(at, to);
    }
    return to;
  }

  const RegexAst& ast_;
  const int64_t max_states_;
  const absl::Time deadline_;
  const int32_t star_node_;
  Nfa nfa_;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<Nfa> BuildNfa(const RegexAst& ast, int64_t max_states, absl::Time deadline, int32_t star_node) {
  return Builder(ast, max_states, deadline, star_node).Run();
}

}  // namespace tpserve::grammar::internal
