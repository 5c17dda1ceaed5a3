// BuildCountedDfa and the counted transitions. Regions of the base table:
// P (states before the loop), C (states that leave the loop and come back to
// it: inside an iteration), S (states after the loop, which never return).
// Virtual state: q for q in P or S; q + base * k for q in C or the loop with
// k iterations done; `fresh` (WithoutEmpty) for the loop at k = 0 that does not
// accept.
#include "grammar/counted_dfa.h"

#include <deque>
#include <vector>

namespace tpserve::grammar::internal {
namespace {

// The kRepeat node to count: the root, or the one large repeat among the
// root's concatenated parts.
int32_t CountedNode(const RegexAst& ast) {
  auto large = [&](int32_t id) {
    const RegexNode& n = ast.nodes[static_cast<size_t>(id)];
    return n.kind == RegexNode::Kind::kRepeat && n.max > kCountedRepeat;
  };
  if (large(ast.root)) return ast.root;
  const RegexNode& root = ast.nodes[static_cast<size_t>(ast.root)];
  if (root.kind != RegexNode::Kind::kConcat) return -1;
  int32_t found = -1;
  for (int32_t c : root.children) {
    if (!large(c)) continue;
    if (found >= 0) return -1;
    found = c;
  }
  return found;
}

std::vector<uint8_t> Reach(const Dfa& dfa, int32_t from, bool forward) {
  const auto n = static_cast<size_t>(dfa.num_states()), nc = static_cast<size_t>(dfa.num_classes);
  std::vector<std::vector<int32_t>> edges(n);
  for (size_t s = 0; s < n; ++s) {
    for (size_t c = 0; c < nc; ++c) {
      if (const int32_t t = dfa.next[s * nc + c]; t >= 0) {
        (forward ? edges[s] : edges[static_cast<size_t>(t)]).push_back(forward ? t : static_cast<int32_t>(s));
      }
    }
  }
  std::vector<uint8_t> seen(n, 0);
  std::deque<int32_t> queue = {from};
  seen[static_cast<size_t>(from)] = 1;
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    for (int32_t t : edges[static_cast<size_t>(s)]) {
      if (!seen[static_cast<size_t>(t)]) seen[static_cast<size_t>(t)] = 1, queue.push_back(t);
    }
  }
  return seen;
}

// Labels the regions and checks that every transition keeps to them.
bool Label(Dfa& dfa) {
  Counter& c = dfa.counter;
  const auto n = static_cast<size_t>(dfa.num_states()), nc = static_cast<size_t>(dfa.num_classes);
  const std::vector<uint8_t> from_loop = Reach(dfa, c.loop, true), to_loop = Reach(dfa, c.loop, false);
  c.region.assign(n, Counter::kP);
  for (size_t s = 0; s < n; ++s) {
    if (static_cast<int32_t>(s) == c.loop) {
      c.region[s] = Counter::kLoop;
    } else if (from_loop[s]) {
      c.region[s] = to_loop[s] ? Counter::kC : Counter::kS;
    }
  }
  for (size_t s = 0; s < n; ++s) {
    for (size_t k = 0; k < nc; ++k) {
      const int32_t t = dfa.next[s * nc + k];
      if (t < 0) continue;
      const uint8_t from = c.region[s], to = c.region[static_cast<size_t>(t)];
      const bool ok = from == Counter::kLoop ? true
                      : from == Counter::kS  ? to == Counter::kS
                                             : to == from || to == Counter::kLoop;  // P or C: stay, or reach the loop
      if (!ok) return false;
      if (from == Counter::kLoop) (to == Counter::kS ? c.has_s : c.has_c) = true;
    }
  }
  return c.region[static_cast<size_t>(dfa.start)] != Counter::kC && c.region[static_cast<size_t>(dfa.start)] != Counter::kS;
}

bool Nullable(const RegexAst& ast, int32_t id) {
  const RegexNode& n = ast.nodes[static_cast<size_t>(id)];
  switch (n.kind) {
    case RegexNode::Kind::kEmpty: return true;
    case RegexNode::Kind::kCodepoints: case RegexNode::Kind::kByte: return false;
    case RegexNode::Kind::kConcat:
      for (int32_t c : n.children) {
        if (!Nullable(ast, c)) return false;
      }
      return true;
    case RegexNode::Kind::kAlt:
      for (int32_t c : n.children) {
        if (Nullable(ast, c)) return true;
      }
      return false;
    case RegexNode::Kind::kRepeat: return n.min == 0 || Nullable(ast, n.children[0]);
  }
  return true;
}

}  // namespace

std::optional<Dfa> BuildCountedDfa(const RegexAst& ast, int64_t max_states, absl::Time deadline) {
  const int32_t node = CountedNode(ast);
  if (node < 0) return std::nullopt;
  const RegexNode& repeat = ast.nodes[static_cast<size_t>(node)];
  if (Nullable(ast, repeat.children[0])) return std::nullopt;  // an empty iteration would count nothing
  absl::StatusOr<Nfa> nfa = BuildNfa(ast, 4 * max_states, deadline, node);
  if (!nfa.ok()) return std::nullopt;
  absl::StatusOr<Dfa> dfa = BuildDfa(*nfa, max_states, deadline);
  if (!dfa.ok() || dfa->start < 0 || dfa->loop < 0) return std::nullopt;
  const int64_t hi = repeat.max;
  if (static_cast<int64_t>(dfa->num_states()) * (hi + 2) >= INT32_MAX) return std::nullopt;
  dfa->counter.loop = dfa->loop;
  dfa->counter.lo = repeat.min;
  dfa->counter.hi = hi;
  if (!Label(*dfa)) return std::nullopt;
  dfa->counted = true;
  dfa->first_bytes = {};
  for (int b = 0; b < 256; ++b) {
    if (dfa->Next(dfa->start, static_cast<uint8_t>(b)) >= 0) dfa->first_bytes[static_cast<size_t>(b / 64)] |= 1ull << (b % 64);
  }
  return std::move(*dfa);
}

int32_t Dfa::CountedNext(int32_t state, uint8_t byte) const {
  const Counter& c = counter;
  const int32_t base = num_states();
  if (state == c.fresh) state = c.loop;
  const int32_t q = state % base;
  const int64_t k = state / base;
  const int32_t t = next[static_cast<size_t>(q) * static_cast<size_t>(num_classes) + byte_class[byte]];
  if (t < 0) return -1;
  switch (c.region[static_cast<size_t>(q)]) {
    case Counter::kLoop:
      if (c.region[static_cast<size_t>(t)] == Counter::kS) return k >= c.lo ? t : -1;
      if (k >= c.hi) return -1;                                               // no further iteration
      return t == c.loop ? static_cast<int32_t>(t + base * (k + 1)) : static_cast<int32_t>(t + base * k);
    case Counter::kC:
      return t == c.loop ? static_cast<int32_t>(t + base * (k + 1)) : static_cast<int32_t>(t + base * k);
    default:  // P (into the loop with k = 0) or S
      return t;
  }
}

bool Dfa::CountedAccepting(int32_t state) const {
  if (state == counter.fresh) return false;
  const int32_t q = state % num_states();
  if (q != counter.loop) return accepting[static_cast<size_t>(q)] != 0;
  return accepting[static_cast<size_t>(q)] != 0 && state / num_states() >= counter.lo;
}

bool Dfa::CountedExtendable(int32_t state) const {
  if (state == counter.fresh) state = counter.loop;
  const int32_t q = state % num_states();
  if (q != counter.loop) return extendable[static_cast<size_t>(q)] != 0;
  const int64_t k = state / num_states();
  return (k < counter.hi && counter.has_c) || (k >= counter.lo && counter.has_s);
}

}  // namespace tpserve::grammar::internal
