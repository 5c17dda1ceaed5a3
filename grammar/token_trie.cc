// The flat preorder trie: tokens sorted by bytes, then one pass that opens a
// node for each byte past the common prefix with the previous token and
// closes (sets `skip` of) the nodes the next token leaves.
#include "grammar/token_trie.h"

#include <algorithm>
#include <numeric>

namespace tpserve::grammar::internal {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& include)
    : contains_(token_bytes.size(), false) {
  std::vector<int32_t> order;
  for (size_t t = 0; t < token_bytes.size(); ++t) {
    // Depth is stored in 16 bits; no real token comes near 64 KiB.
    if (include[t] && !token_bytes[t].empty() && token_bytes[t].size() < 0xFFFF) order.push_back(static_cast<int32_t>(t));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)];
  });
  nodes_.push_back(TrieNode{});
  std::vector<int32_t> open = {0};  // open[d]: the node at depth d on the current path
  const std::string* previous = nullptr;
  for (int32_t t : order) {
    const std::string& bytes = token_bytes[static_cast<size_t>(t)];
    size_t common = 0;
    if (previous != nullptr) {
      const size_t n = std::min(previous->size(), bytes.size());
      while (common < n && (*previous)[common] == bytes[common]) ++common;
    }
    while (open.size() > common + 1) {  // close the nodes deeper than the common prefix
      nodes_[static_cast<size_t>(open.back())].skip = static_cast<int32_t>(nodes_.size());
      open.pop_back();
    }
    for (size_t d = common; d < bytes.size(); ++d) {
      TrieNode node;
      node.depth = static_cast<uint16_t>(d + 1);
      node.byte = static_cast<uint8_t>(bytes[d]);
      open.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(node);
    }
    TrieNode& leaf = nodes_[static_cast<size_t>(open.back())];
    if (leaf.num_tokens == 0) leaf.token_begin = static_cast<int32_t>(token_ids_.size());
    if (leaf.num_tokens < 255) {  // identical bytes: consecutive in `order`
      token_ids_.push_back(t);
      contains_[static_cast<size_t>(t)] = true;
      ++leaf.num_tokens;
    }
    max_depth_ = std::max(max_depth_, static_cast<int>(bytes.size()));
    previous = &bytes;
  }
  for (int32_t id : open) nodes_[static_cast<size_t>(id)].skip = static_cast<int32_t>(nodes_.size());
  BuildShortcuts();
}

// Bottom-up over the preorder (children after their parent): each node's
// bytes below and height from its children's; tokens are in preorder, so a
// subtree's are one range, from a running count.
void TokenTrie::BuildShortcuts() {
  const size_t n = nodes_.size();
  std::vector<int32_t> tokens_before(n + 1, 0);  // [i] tokens of the nodes before i in preorder
  for (size_t i = 0; i < n; ++i) tokens_before[i + 1] = tokens_before[i] + nodes_[i].num_tokens;
  std::vector<std::array<uint64_t, 4>> below(n);
  std::vector<int32_t> height(n, 0);
  shortcut_index_.assign(n, -1);
  for (size_t i = n; i-- > 0;) {
    const auto skip = static_cast<size_t>(nodes_[i].skip);
    for (size_t c = i + 1; c < skip; c = static_cast<size_t>(nodes_[c].skip)) {
      for (size_t w = 0; w < 4; ++w) below[i][w] |= below[c][w];
      below[i][nodes_[c].byte / 64u] |= uint64_t{1} << (nodes_[c].byte % 64u);
      height[i] = std::max(height[i], height[c] + 1);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const auto skip = static_cast<size_t>(nodes_[i].skip);
    if (skip - i - 1 < static_cast<size_t>(kMinShortcutNodes)) continue;
    shortcut_index_[i] = static_cast<int32_t>(shortcuts_.size());
    shortcuts_.push_back(TrieShortcut{.below = below[i], .tokens_begin = tokens_before[i + 1],
                                      .tokens_end = tokens_before[skip], .height = height[i]});
  }
}

}  // namespace tpserve::grammar::internal
