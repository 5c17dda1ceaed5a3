// Subset construction over byte classes: bytes that no arc of the NFA tells
// apart share one column of the table. A DFA state is the set of "important"
// NFA states (those with byte arcs, and the accepting one) in the epsilon
// closure; states that cannot reach a match are removed afterwards.
#include "grammar/dfa.h"

#include <algorithm>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/random.h"

namespace tpserve::grammar::internal {
namespace {

class SubsetBuilder {
 public:
  SubsetBuilder(const Nfa& nfa, int64_t max_states, absl::Time deadline)
      : nfa_(nfa), max_states_(max_states), deadline_(deadline), stamp_(static_cast<size_t>(nfa.num_states()), 0) {}

  absl::StatusOr<Dfa> Run() {
    ComputeClasses();
    const int32_t start = Intern(Closure({nfa_.start}));
    for (size_t d = 0; d < sets_.size(); ++d) {
      if ((d & 0xFF) == 0xFF && absl::Now() > deadline_) {
        return absl::InvalidArgumentError("regex compile took longer than the limit (CompileLimits::max_time)");
      }
      Expand(d);
      if (static_cast<int64_t>(sets_.size()) > max_states_) {
        return absl::InvalidArgumentError(absl::StrCat("regex needs more than ", max_states_,
                                                       " automaton states (CompileLimits::max_automaton_states)"));
      }
    }
    return KeepLive(start, FindLoop());
  }

  // The one DFA state holding nfa.marked, when it is exactly its closure
  // (between two iterations and nowhere else); -1 otherwise.
  int32_t FindLoop() {
    if (nfa_.marked < 0) return -1;
    int32_t found = -1;
    for (size_t d = 0; d < sets_.size(); ++d) {
      if (!std::binary_search(sets_[d].begin(), sets_[d].end(), nfa_.marked)) continue;
      if (found >= 0) return -1;
      found = static_cast<int32_t>(d);
    }
    if (found < 0 || Closure({nfa_.marked}) != sets_[static_cast<size_t>(found)]) return -1;
    return found;
  }

 private:
  void ComputeClasses() {
    std::array<bool, 257> cut{};
    for (const Nfa::Arc& arc : nfa_.arcs) {
      if (arc.epsilon) continue;
      cut[arc.lo] = true;
      cut[arc.hi + 1] = true;
    }
    int32_t cls = 0;
    for (int b = 0; b < 256; ++b) {
      if (b > 0 && cut[static_cast<size_t>(b)]) ++cls;
      dfa_.byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(cls);
    }
    dfa_.num_classes = cls + 1;
  }

  bool Important(int32_t s) const {
    if (s == nfa_.accept || s == nfa_.marked) return true;
    for (int32_t a = nfa_.first_arc[static_cast<size_t>(s)]; a >= 0; a = nfa_.arcs[static_cast<size_t>(a)].next) {
      if (!nfa_.arcs[static_cast<size_t>(a)].epsilon) return true;
    }
    return false;
  }

  // Sorted important states of the epsilon closure of `seeds`.
  std::vector<int32_t> Closure(const std::vector<int32_t>& seeds) {
    ++generation_;
    std::vector<int32_t> out;
    stack_.assign(seeds.begin(), seeds.end());
    while (!stack_.empty()) {
      const int32_t s = stack_.back();
      stack_.pop_back();
      if (stamp_[static_cast<size_t>(s)] == generation_) continue;
      stamp_[static_cast<size_t>(s)] = generation_;
      if (Important(s)) out.push_back(s);
      for (int32_t a = nfa_.first_arc[static_cast<size_t>(s)]; a >= 0; a = nfa_.arcs[static_cast<size_t>(a)].next) {
        const Nfa::Arc& arc = nfa_.arcs[static_cast<size_t>(a)];
        if (arc.epsilon) stack_.push_back(arc.to);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  int32_t Intern(std::vector<int32_t> set) {
    if (set.empty()) return -1;
    auto [it, inserted] = ids_.try_emplace(set, static_cast<int32_t>(sets_.size()));
    if (inserted) {
      accepting_.push_back(std::binary_search(set.begin(), set.end(), nfa_.accept) ? 1 : 0);
      sets_.push_back(std::move(set));
      next_.resize(next_.size() + static_cast<size_t>(dfa_.num_classes), -1);
    }
    return it->second;
  }

  void Expand(size_t d) {
    buckets_.resize(static_cast<size_t>(dfa_.num_classes));
    for (auto& b : buckets_) b.clear();
    for (int32_t s : sets_[d]) {
      for (int32_t a = nfa_.first_arc[static_cast<size_t>(s)]; a >= 0; a = nfa_.arcs[static_cast<size_t>(a)].next) {
        const Nfa::Arc& arc = nfa_.arcs[static_cast<size_t>(a)];
        if (arc.epsilon) continue;
        for (int c = dfa_.byte_class[arc.lo]; c <= dfa_.byte_class[arc.hi]; ++c) {
          buckets_[static_cast<size_t>(c)].push_back(arc.to);
        }
      }
    }
    for (int32_t c = 0; c < dfa_.num_classes; ++c) {
      if (buckets_[static_cast<size_t>(c)].empty()) continue;
      const int32_t to = Intern(Closure(buckets_[static_cast<size_t>(c)]));
      next_[d * static_cast<size_t>(dfa_.num_classes) + static_cast<size_t>(c)] = to;
    }
  }

  // Renumbers the states that reach an accepting one; the rest become -1.
  Dfa KeepLive(int32_t start, int32_t loop) {
    const size_t n = sets_.size(), nc = static_cast<size_t>(dfa_.num_classes);
    std::vector<std::vector<int32_t>> reverse(n);
    for (size_t s = 0; s < n; ++s) {
      for (size_t c = 0; c < nc; ++c) {
        if (const int32_t t = next_[s * nc + c]; t >= 0) reverse[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
      }
    }
    std::vector<uint8_t> live(n, 0);
    std::deque<int32_t> queue;
    for (size_t s = 0; s < n; ++s) {
      if (accepting_[s]) live[s] = 1, queue.push_back(static_cast<int32_t>(s));
    }
    while (!queue.empty()) {
      const int32_t s = queue.front();
      queue.pop_front();
      for (int32_t p : reverse[static_cast<size_t>(s)]) {
        if (!live[static_cast<size_t>(p)]) live[static_cast<size_t>(p)] = 1, queue.push_back(p);
      }
    }
    std::vector<int32_t> renumber(n, -1);
    int32_t count = 0;
    for (size_t s = 0; s < n; ++s) {
      if (live[s]) renumber[s] = count++;
    }
    dfa_.start = start >= 0 ? renumber[static_cast<size_t>(start)] : -1;
    dfa_.loop = loop >= 0 ? renumber[static_cast<size_t>(loop)] : -1;
    dfa_.next.assign(static_cast<size_t>(count) * nc, -1);
    dfa_.accepting.assign(static_cast<size_t>(count), 0);
    dfa_.extendable.assign(static_cast<size_t>(count), 0);
    for (size_t s = 0; s < n; ++s) {
      if (renumber[s] < 0) continue;
      const auto r = static_cast<size_t>(renumber[s]);
      dfa_.accepting[r] = accepting_[s];
      for (size_t c = 0; c < nc; ++c) {
        const int32_t t = next_[s * nc + c];
        const int32_t to = t >= 0 ? renumber[static_cast<size_t>(t)] : -1;
        dfa_.next[r * nc + c] = to;
        if (to >= 0) dfa_.extendable[r] = 1;
      }
    }
    if (dfa_.start >= 0) {
      for (int b = 0; b < 256; ++b) {
        if (dfa_.Next(dfa_.start, static_cast<uint8_t>(b)) >= 0) dfa_.first_bytes[static_cast<size_t>(b / 64)] |= 1ull << (b % 64);
      }
    }
    return std::move(dfa_);
  }

  const Nfa& nfa_;
  const int64_t max_states_;
  const absl::Time deadline_;
  Dfa dfa_;
  std::vector<uint32_t> stamp_;  // [nfa states] closure visits
  uint32_t generation_ = 0;
  std::vector<int32_t> stack_;
  std::vector<std::vector<int32_t>> sets_;  // [dfa states] important NFA states
  std::vector<uint8_t> accepting_;          // [dfa states]
  std::vector<int32_t> next_;               // [dfa states * classes]
  absl::flat_hash_map<std::vector<int32_t>, int32_t> ids_;
  std::vector<std::vector<int32_t>> buckets_;  // [classes] targets while expanding one state
};

}  // namespace

absl::StatusOr<Dfa> BuildDfa(const Nfa& nfa, int64_t max_states, absl::Time deadline) {
  return SubsetBuilder(nfa, max_states, deadline).Run();
}

// One round of Moore's refinement: a state's new class is its class and its
// successors' classes, numbered through a hash of that signature (collisions
// told apart by comparing with the first state of each class).
std::vector<int32_t> DepthClasses(const Dfa& dfa, int depth, int64_t budget, int32_t distinguished) {
  const auto n = static_cast<size_t>(dfa.num_states()), nc = static_cast<size_t>(dfa.num_classes);
  std::vector<int32_t> cls(n), next(n), first;  // first[c]: a state of new class c
  for (size_t s = 0; s < n; ++s) cls[s] = dfa.accepting[s] + (static_cast<int32_t>(s) == distinguished ? 2 : 0);
  auto successor = [&](size_t s, size_t c) {
    const int32_t t = dfa.next[s * nc + c];
    return t < 0 ? -1 : cls[static_cast<size_t>(t)];
  };
  auto same = [&](size_t a, size_t b) {
    if (cls[a] != cls[b]) return false;
    for (size_t c = 0; c < nc; ++c) {
      if (successor(a, c) != successor(b, c)) return false;
    }
    return true;
  };
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> by_hash;  // signature hash -> classes
  size_t count = 0;
  for (int round = 0; round < depth; ++round) {
    budget -= static_cast<int64_t>(n * (nc + 2));
    if (budget < 0) {  // too costly: no two states share a class
      for (size_t s = 0; s < n; ++s) cls[s] = static_cast<int32_t>(s);
      return cls;
    }
    by_hash.clear();
    first.clear();
    for (size_t s = 0; s < n; ++s) {
      uint64_t h = SplitMix64(static_cast<uint64_t>(cls[s]));
      for (size_t c = 0; c < nc; ++c) h = SplitMix64(h ^ static_cast<uint64_t>(static_cast<uint32_t>(successor(s, c))));
      std::vector<int32_t>& classes = by_hash[h];
      int32_t id = -1;
      for (int32_t k : classes) {
        if (same(static_cast<size_t>(first[static_cast<size_t>(k)]), s)) id = k;
      }
      if (id < 0) {
        id = static_cast<int32_t>(first.size());
        first.push_back(static_cast<int32_t>(s));
        classes.push_back(id);
      }
      next[s] = id;
    }
    const bool stable = first.size() == count;
    count = first.size();
    cls.swap(next);
    if (stable) break;
  }
  return cls;
}

namespace {

// What a state's behaviour over the next `depth` bytes depends on: the state
// itself, or for a counted automaton its base state and how far its count is
// from lo and hi, up to depth + 1.
int64_t BehaviourKey(const Dfa& dfa, int32_t state, int depth) {
  if (!dfa.counted) return state;
  const Counter& c = dfa.counter;
  if (state == c.fresh) return -2;
  const int32_t base = dfa.num_states();
  const int32_t q = state % base;
  const int64_t k = state / base;
  const int64_t width = depth + 2;
  const int64_t lo = std::min<int64_t>(std::max<int64_t>(c.lo - k, 0), depth + 1);
  const int64_t hi = std::min<int64_t>(c.hi - k, depth + 1);
  return (q * width + lo) * width + hi;
}

}  // namespace

// Breadth first over pairs of states, layer by layer: a pair is first seen at
// its least depth, so it is expanded once. Pairs are told apart by their
// BehaviourKey at the full depth (counts farther than that from their bounds
// all behave alike).
bool EquivalentStates(const Dfa& dfa_a, int32_t a, const Dfa& dfa_b, int32_t b, int depth, int64_t budget) {
  // One byte per pair of byte classes: no other byte leads either automaton elsewhere.
  std::vector<uint8_t> bytes;
  {
    absl::flat_hash_set<std::pair<int32_t, int32_t>> classes;
    for (int byte = 0; byte < 256; ++byte) {
      if (classes.insert({dfa_a.byte_class[static_cast<size_t>(byte)], dfa_b.byte_class[static_cast<size_t>(byte)]}).second) {
        bytes.push_back(static_cast<uint8_t>(byte));
      }
    }
  }
  auto key = [&](int32_t x, int32_t y) { return std::make_pair(BehaviourKey(dfa_a, x, depth), BehaviourKey(dfa_b, y, depth)); };
  absl::flat_hash_set<std::pair<int64_t, int64_t>> seen = {key(a, b)};
  std::vector<std::pair<int32_t, int32_t>> layer = {{a, b}}, next;
  for (int d = 0; !layer.empty(); ++d) {
    next.clear();
    for (const auto& [x, y] : layer) {
      if (dfa_a.Accepting(x) != dfa_b.Accepting(y)) return false;
      if (d == depth) continue;
      for (uint8_t byte : bytes) {
        const int32_t nx = dfa_a.Next(x, byte), ny = dfa_b.Next(y, byte);
        if ((nx < 0) != (ny < 0)) return false;
        if (nx < 0 || !seen.insert(key(nx, ny)).second) continue;
        if (static_cast<int64_t>(seen.size()) > budget) return false;
        next.emplace_back(nx, ny);
      }
    }
    layer.swap(next);
  }
  return true;
}

Dfa WithoutEmpty(const Dfa& dfa) {
  Dfa out = dfa;
  if (!dfa.MatchesEmpty()) return out;
  if (dfa.counted) {  // the start is the loop with count 0 (counted_dfa.cc)
    out.counter.fresh = static_cast<int32_t>(dfa.num_states() * (dfa.counter.hi + 1));
    out.start = out.CountedExtendable(out.counter.fresh) ? out.counter.fresh : -1;
    if (out.start < 0) out.first_bytes = {};
    return out;
  }
  const auto nc = static_cast<size_t>(dfa.num_classes);
  const auto old_start = static_cast<size_t>(dfa.start);
  const int32_t fresh = dfa.num_states();
  out.next.insert(out.next.end(), dfa.next.begin() + static_cast<std::ptrdiff_t>(old_start * nc),
                  dfa.next.begin() + static_cast<std::ptrdiff_t>((old_start + 1) * nc));
  out.accepting.push_back(0);
  out.extendable.push_back(dfa.extendable[old_start]);
  out.start = dfa.extendable[old_start] ? fresh : -1;
  if (out.start < 0) out.first_bytes = {};
  return out;
}

}  // namespace tpserve::grammar::internal
