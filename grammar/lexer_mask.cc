// One forward scan of the preorder trie per automaton state: a node whose
// byte kills the automaton skips its whole subtree. A plain automaton steps
// through its table inline; a counted one (counted_dfa.h) too, its count
// kept beside the base state (no division per node as in Dfa::Next).
// From a reference mask, only the root's subtrees marked for recomputation
// are cleared (through their token ranges) and scanned again.
#include "grammar/lexer_mask.h"

#include <array>
#include <type_traits>

#include "absl/container/flat_hash_map.h"

#include "grammar/matcher.h"

namespace tpserve::grammar::internal {
namespace {

// Sets the bits of the node's tokens in `words`.
inline void AddTokens(const TrieNode& node, const TokenTrie& trie, uint32_t* words) {
  const int32_t* ids = trie.token_ids() + node.token_begin;
  for (int k = 0; k < node.num_tokens; ++k) words[ids[k] / 32] |= 1u << (ids[k] % 32);
}

// A counted automaton's state during a scan: base state q and count k kept
// apart, so a step is a table lookup and a compare, not the division
// Dfa::CountedNext pays to decode q + base * k. The same transitions and
// acceptance (counted_dfa.cc), tested against Dfa::Next token by token.
struct CountedState {
  int32_t q;
  int32_t k;
};

inline CountedState DecodeCounted(const Dfa& dfa, int32_t state) {
  if (state == dfa.counter.fresh) return {dfa.counter.loop, 0};  // the virtual start: the loop at 0
  const int32_t base = dfa.num_states();
  return {state % base, state / base};
}

// The state after `t`, the table's next base state from `from`; false: dead
// (the count out of [lo, hi]).
inline bool CountedStep(const Counter& c, CountedState from, int32_t t, CountedState& to) {
  const auto region = static_cast<Counter::Region>(c.region[static_cast<size_t>(from.q)]);
  int32_t k = from.k;
  if (region == Counter::kLoop) {
    if (c.region[static_cast<size_t>(t)] == Counter::kS) {
      if (k < c.lo) return false;
      k = 0;
    } else {
      if (k >= c.hi) return false;  // no further iteration
      if (t == c.loop) ++k;
    }
  } else if (region == Counter::kC) {
    if (t == c.loop) ++k;
  } else {  // P (into the loop at 0) or S
    k = 0;
  }
  to = {t, k};
  return true;
}

// Each base state's bytes that lead back to it (a string's characters, a
// pattern's class), computed when a scan first needs them.
class SelfLoops {
 public:
  explicit SelfLoops(const Dfa& dfa) : dfa_(dfa) {}
  const std::array<uint64_t, 4>& Of(int32_t q) {
    auto [it, inserted] = loops_.try_emplace(q);
    if (inserted) {
      const int32_t* row = dfa_.next.data() + static_cast<size_t>(q) * static_cast<size_t>(dfa_.num_classes);
      for (int b = 0; b < 256; ++b) {
        if (row[dfa_.byte_class[static_cast<size_t>(b)]] == q) it->second[static_cast<size_t>(b / 64)] |= uint64_t{1} << (b % 64);
      }
    }
    return it->second;
  }

 private:
  const Dfa& dfa_;
  absl::flat_hash_map<int32_t, std::array<uint64_t, 4>> loops_;
};

// Whether the automaton, in base state `q` at a node, stays in `q` over
// every byte below it (so every token below is allowed, and none of those
// nodes is an end when `q` does not accept).
inline bool LoopsBelow(const TrieShortcut& sc, const std::array<uint64_t, 4>& loops) {
  return ((sc.below[0] & ~loops[0]) | (sc.below[1] & ~loops[1]) | (sc.below[2] & ~loops[2]) |
          (sc.below[3] & ~loops[3])) == 0;
}

// The tokens strictly below a shortcut node, set without visiting the nodes.
inline void AddTokensBelow(const TrieShortcut& sc, const TokenTrie& trie, uint32_t* words) {
  const int32_t* ids = trie.token_ids();
  for (int32_t k = sc.tokens_begin; k < sc.tokens_end; ++k) words[ids[k] / 32] |= 1u << (ids[k] % 32);
}

// Scans nodes [begin, end) of `trie`, whole subtrees whose parents (at depth
// nodes[begin].depth - 1) are in automaton state `state0`: sets the bits of
// the tokens that stay live and appends the nodes with children where the
// automaton accepts to `ends`. Returns the nodes visited.
// A node with a shortcut whose state loops on every byte below it (and does
// not accept; a counted one with room for the deepest) takes its subtree
// whole: its tokens set as one range, the nodes not visited.
template <bool kCounted>
int64_t Scan(const Dfa& dfa, int32_t state0, const TokenTrie& trie, int32_t begin, int32_t end, uint32_t* words,
          std::vector<int32_t>& ends, SelfLoops& loops, int64_t& skipped) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  const int32_t* next = dfa.next.data();
  const uint8_t* accepting = dfa.accepting.data();
  const auto nc = static_cast<size_t>(dfa.num_classes);
  using State = std::conditional_t<kCounted, CountedState, int32_t>;
  std::vector<State> state(static_cast<size_t>(trie.max_depth()) + 1);  // [depth]
  if constexpr (kCounted) {
    state[nodes[static_cast<size_t>(begin)].depth - 1u] = DecodeCounted(dfa, state0);
  } else {
    state[nodes[static_cast<size_t>(begin)].depth - 1u] = state0;
  }
  int64_t scanned = 0;
  for (int32_t i = begin; i < end; ++scanned) {
    const TrieNode& node = nodes[static_cast<size_t>(i)];
    const State s = state[node.depth - 1u];
    bool accepts;
    if constexpr (kCounted) {
      const int32_t t = next[static_cast<size_t>(s.q) * nc + dfa.byte_class[node.byte]];
      if (t < 0 || !CountedStep(dfa.counter, s, t, state[node.depth])) {
        i = node.skip;
        continue;
      }
      accepts = accepting[t] != 0 && (t != dfa.counter.loop || state[node.depth].k >= dfa.counter.lo);
    } else {
      const int32_t to = next[static_cast<size_t>(s) * nc + dfa.byte_class[node.byte]];
      if (to < 0) {
        i = node.skip;
        continue;
      }
      state[node.depth] = to;
      accepts = accepting[to] != 0;
    }
    if (node.num_tokens != 0) AddTokens(node, trie, words);
    if (node.skip > i + 1 && accepts) ends.push_back(i);
    const bool large = node.skip - i > TokenTrie::kMinShortcutNodes;  // has a shortcut: its index read only then
    if (const TrieShortcut* sc = accepts || !large ? nullptr : trie.shortcut(i); sc != nullptr) {
      bool whole;
      if constexpr (kCounted) {
        const CountedState at = state[node.depth];
        whole = at.q == dfa.counter.loop && at.k + sc->height <= dfa.counter.hi && !accepting[at.q] &&
                LoopsBelow(*sc, loops.Of(at.q));
      } else {
        whole = LoopsBelow(*sc, loops.Of(state[node.depth]));
      }
      if (whole) {
        AddTokensBelow(*sc, trie, words);
        skipped += node.skip - i - 1;
        i = node.skip;
        continue;
      }
    }
    ++i;
  }
  return scanned;
}

// Scan from `entry`; the nodes it visited into walk.scanned, and those it
// took whole too into walk.covered.
struct WalkCost {
  int64_t scanned = 0, covered = 0;
};
void ScanFrom(const LexerEntry& entry, const TokenTrie& trie, int32_t begin, int32_t end, uint32_t* words,
              std::vector<int32_t>& ends, SelfLoops& loops, WalkCost& walk) {
  int64_t skipped = 0;
  const int64_t visited = entry.dfa->counted
                              ? Scan<true>(*entry.dfa, entry.state, trie, begin, end, words, ends, loops, skipped)
                              : Scan<false>(*entry.dfa, entry.state, trie, begin, end, words, ends, loops, skipped);
  walk.scanned += visited;
  walk.covered += visited + skipped;
}

// The children of the end nodes, bucketed by byte.
LexerMask::Ends GroupEnds(const std::vector<int32_t>& end_nodes, const TokenTrie& trie) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  LexerMask::Ends group;
  std::array<int32_t, 257>& count = group.begin;
  size_t total = 0;
  auto children = [&](int32_t node, auto&& visit) {
    for (int32_t c = node + 1; c < nodes[static_cast<size_t>(node)].skip; c = nodes[static_cast<size_t>(c)].skip) visit(c);
  };
  for (int32_t node : end_nodes) {
    children(node, [&](int32_t c) { ++count[nodes[static_cast<size_t>(c)].byte + 1u], ++total; });
  }
  if (total == 0) return group;
  for (size_t b = 1; b < 257; ++b) count[b] += count[b - 1];
  std::array<int32_t, 257> fill = count;
  group.children.resize(total);
  for (int32_t node : end_nodes) {
    children(node, [&](int32_t c) { group.children[static_cast<size_t>(fill[nodes[static_cast<size_t>(c)].byte]++)] = c; });
  }
  return group;
}

// The mask from its words and end nodes: tokens as ids when few.
std::shared_ptr<const LexerMask> Finish(std::vector<uint32_t> words, std::vector<int32_t> end_nodes, WalkCost walk,
                                        const TokenTrie& trie, int32_t vocab_size) {
  auto mask = std::make_shared<LexerMask>();
  mask->scanned = walk.scanned;
  mask->covered = walk.covered;
  for (size_t w = 0; w < words.size(); ++w) {
    if (words[w] == 0) continue;
    if (mask->count == 0) mask->word_begin = w;
    mask->word_end = w + 1;
    mask->count += __builtin_popcount(words[w]);
  }
  mask->ends = GroupEnds(end_nodes, trie);
  mask->end_nodes = std::move(end_nodes);
  if (mask->count * 32 > vocab_size) {  // ids would take more than the bits / 8
    mask->words = std::move(words);
    return mask;
  }
  mask->tokens.reserve(static_cast<size_t>(mask->count));
  for (size_t w = 0; w < words.size(); ++w) {
    for (uint32_t bits = words[w]; bits != 0; bits &= bits - 1) {
      mask->tokens.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
    }
  }
  return mask;
}

// Clears the bits of every token in the subtree of `node`: through its
// shortcut's token range when it has one (no node visited), else node by node.
void ClearTokens(const TokenTrie& trie, int32_t node, uint32_t* words) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  const int32_t* ids = trie.token_ids();
  auto clear = [&](int32_t t) { words[static_cast<size_t>(t / 32)] &= ~(1u << (t % 32)); };
  const TrieNode& top = nodes[static_cast<size_t>(node)];
  if (const TrieShortcut* sc = trie.shortcut(node); sc != nullptr) {
    for (int k = 0; k < top.num_tokens; ++k) clear(ids[top.token_begin + k]);
    for (int32_t k = sc->tokens_begin; k < sc->tokens_end; ++k) clear(ids[k]);
    return;
  }
  for (int32_t i = node; i < top.skip; ++i) {
    const TrieNode& n = nodes[static_cast<size_t>(i)];
    for (int k = 0; k < n.num_tokens; ++k) clear(ids[n.token_begin + k]);
  }
}

}  // namespace

void LexerMask::OrInto(uint32_t* out) const {
  if (!words.empty()) {
    for (size_t w = word_begin; w < word_end; ++w) out[w] |= words[w];
  } else {
    for (int32_t t : tokens) out[t / 32] |= 1u << (t % 32);
  }
}

std::shared_ptr<const LexerMask> ComputeLexerMask(const LexerEntry& entry, const TokenTrie& trie, int32_t vocab_size) {
  std::vector<uint32_t> words(MaskWords(vocab_size), 0);
  std::vector<int32_t> end_nodes;
  const auto n = static_cast<int32_t>(trie.nodes().size());
  SelfLoops loops(*entry.dfa);
  WalkCost walk;
  if (n > 1) ScanFrom(entry, trie, 1, n, words.data(), end_nodes, loops, walk);
  return Finish(std::move(words), std::move(end_nodes), walk, trie, vocab_size);
}

std::shared_ptr<const LexerMask> ComputeLexerMaskFrom(const LexerEntry& entry, const LexerMask& reference,
                                                      const std::array<bool, 256>& recompute, const TokenTrie& trie,
                                                      int32_t vocab_size) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  std::vector<uint32_t> words(MaskWords(vocab_size), 0);
  reference.OrInto(words.data());
  std::vector<int32_t> end_nodes;
  size_t kept = 0;  // reference.end_nodes before the current subtree
  WalkCost walk;
  const auto n = static_cast<int32_t>(nodes.size());
  SelfLoops loops(*entry.dfa);
  for (int32_t c = 1; c < n; c = nodes[static_cast<size_t>(c)].skip) {
    const int32_t skip = nodes[static_cast<size_t>(c)].skip;
    const bool again = recompute[nodes[static_cast<size_t>(c)].byte];
    for (; kept < reference.end_nodes.size() && reference.end_nodes[kept] < skip; ++kept) {
      if (!again) end_nodes.push_back(reference.end_nodes[kept]);
    }
    if (!again) continue;
    ClearTokens(trie, c, words.data());  // the reference's tokens of this subtree out
    ScanFrom(entry, trie, c, skip, words.data(), end_nodes, loops, walk);
  }
  return Finish(std::move(words), std::move(end_nodes), walk, trie, vocab_size);
}

}  // namespace tpserve::grammar::internal
