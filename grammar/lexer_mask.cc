// One forward scan of the preorder trie per lexer state: a node whose byte
// kills every automaton skips its whole subtree. One automaton (the common
// case: inside a string, a number, a literal) has its own loop.
#include "grammar/lexer_mask.h"

#include "grammar/matcher.h"

namespace tpserve::grammar::internal {
namespace {

using EndPoints = std::vector<std::pair<int32_t, int32_t>>;  // (trie node, entry)

// Sets the bits of the node's tokens in `words`; returns how many.
inline int64_t AddTokens(const TrieNode& node, const TokenTrie& trie, uint32_t* words) {
  const int32_t* ids = trie.token_ids() + node.token_begin;
  for (int k = 0; k < node.num_tokens; ++k) words[ids[k] / 32] |= 1u << (ids[k] % 32);
  return node.num_tokens;
}

int64_t WalkOne(const LexerEntry& entry, const TokenTrie& trie, uint32_t* words, EndPoints& ends) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  const Dfa& dfa = *entry.dfa;
  const int32_t* next = dfa.next.data();
  const uint8_t* accepting = dfa.accepting.data();
  const auto nc = static_cast<size_t>(dfa.num_classes);
  std::vector<int32_t> state(static_cast<size_t>(trie.max_depth()) + 1);  // [depth]
  state[0] = entry.state;
  const auto n = static_cast<int32_t>(nodes.size());
  int64_t count = 0;
  for (int32_t i = 1; i < n;) {
    const TrieNode& node = nodes[static_cast<size_t>(i)];
    const int32_t s = state[node.depth - 1u];
    const int32_t to = next[static_cast<size_t>(s) * nc + dfa.byte_class[node.byte]];
    if (to < 0) {
      i = node.skip;
      continue;
    }
    state[node.depth] = to;
    if (node.num_tokens != 0) count += AddTokens(node, trie, words);
    if (accepting[to] && node.skip > i + 1) ends.emplace_back(i, 0);
    ++i;
  }
  return count;
}

int64_t WalkMany(std::span<const LexerEntry> entries, const TokenTrie& trie, uint32_t* words, EndPoints& ends) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  const size_t k = entries.size();
  std::vector<int32_t> state((static_cast<size_t>(trie.max_depth()) + 1) * k);  // [depth][entry], -1 dead
  for (size_t e = 0; e < k; ++e) state[e] = entries[e].state;
  const auto n = static_cast<int32_t>(nodes.size());
  int64_t count = 0;
  for (int32_t i = 1; i < n;) {
    const TrieNode& node = nodes[static_cast<size_t>(i)];
    const int32_t* parent = &state[(node.depth - 1u) * k];
    int32_t* here = &state[node.depth * k];
    bool live = false;
    for (size_t e = 0; e < k; ++e) {
      here[e] = parent[e] < 0 ? -1 : entries[e].dfa->Next(parent[e], node.byte);
      live |= here[e] >= 0;
    }
    if (!live) {
      i = node.skip;
      continue;
    }
    if (node.num_tokens != 0) count += AddTokens(node, trie, words);
    if (node.skip > i + 1) {
      for (size_t e = 0; e < k; ++e) {
        if (here[e] >= 0 && entries[e].dfa->Accepting(here[e])) {
          ends.emplace_back(i, static_cast<int32_t>(e));
        }
      }
    }
    ++i;
  }
  return count;
}

// The children of each end point, bucketed by entry and then by byte.
void GroupEnds(const EndPoints& ends, size_t num_entries, const TokenTrie& trie, LexerMask& mask) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  for (size_t e = 0; e < num_entries; ++e) {
    std::array<int32_t, 257> count{};
    size_t total = 0;
    for (const auto& [node, entry] : ends) {
      if (static_cast<size_t>(entry) != e) continue;
      for (int32_t c = node + 1; c < nodes[static_cast<size_t>(node)].skip; c = nodes[static_cast<size_t>(c)].skip) {
        ++count[nodes[static_cast<size_t>(c)].byte + 1u];
        ++total;
      }
    }
    if (total == 0) continue;
    LexerMask::Ends group;
    group.entry = static_cast<int32_t>(e);
    for (size_t b = 1; b < 257; ++b) count[b] += count[b - 1];
    group.begin = count;
    group.children.resize(total);
    for (const auto& [node, entry] : ends) {
      if (static_cast<size_t>(entry) != e) continue;
      for (int32_t c = node + 1; c < nodes[static_cast<size_t>(node)].skip; c = nodes[static_cast<size_t>(c)].skip) {
        group.children[static_cast<size_t>(count[nodes[static_cast<size_t>(c)].byte]++)] = c;
      }
    }
    mask.ends.push_back(std::move(group));
  }
}

}  // namespace

std::shared_ptr<const LexerMask> ComputeLexerMask(std::span<const LexerEntry> entries, const TokenTrie& trie,
                                                  int32_t vocab_size) {
  auto mask = std::make_shared<LexerMask>();
  std::vector<uint32_t> words(MaskWords(vocab_size), 0);
  EndPoints ends;
  if (entries.size() == 1 && !entries[0].dfa->counted) {  // the table alone
    mask->count = WalkOne(entries[0], trie, words.data(), ends);
  } else if (!entries.empty()) {
    mask->count = WalkMany(entries, trie, words.data(), ends);
  }
  GroupEnds(ends, entries.size(), trie, *mask);
  if (mask->count * 32 > vocab_size) {  // ids would take more than the bits / 8
    mask->words = std::move(words);
  } else {
    for (size_t w = 0; w < words.size(); ++w) {
      for (uint32_t bits = words[w]; bits != 0; bits &= bits - 1) {
        mask->tokens.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
      }
    }
  }
  return mask;
}

}  // namespace tpserve::grammar::internal
