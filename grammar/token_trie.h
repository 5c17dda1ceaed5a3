// The vocabulary's tokens as a trie over their bytes (internal to the grammar
// engine), laid out flat in preorder so a walk is one forward scan that skips
// whole subtrees: node i's subtree is [i, nodes[i].skip). Built once per
// vocabulary; ids the caller leaves out (special ids, stop ids, ids with no
// bytes) are not in it: the matcher allows stop ids itself, never the others.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpserve::grammar::internal {

struct TrieNode {
  int32_t skip = 0;        // index past this node's subtree
  int32_t token_begin = 0; // tokens ending here: token_ids[token_begin, token_begin + num_tokens)
  uint16_t depth = 0;      // bytes from the root (root: 0)
  uint8_t byte = 0;        // the byte that leads here from the parent
  uint8_t num_tokens = 0;
};

class TokenTrie {
 public:
  // token_bytes: [V]; include: [V] whether id t belongs in the trie.
  TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& include);

  const std::vector<TrieNode>& nodes() const { return nodes_; }  // [N], nodes()[0] is the root
  const int32_t* token_ids() const { return token_ids_.data(); }
  int max_depth() const { return max_depth_; }
  // [V] whether id t is in the trie (included, with bytes, not one of more
  // than 255 ids with the same bytes).
  const std::vector<bool>& contains() const { return contains_; }
  size_t MemoryBytes() const { return nodes_.size() * sizeof(TrieNode) + token_ids_.size() * sizeof(int32_t); }

 private:
  std::vector<TrieNode> nodes_;
  std::vector<int32_t> token_ids_;
  std::vector<bool> contains_;
  int max_depth_ = 0;
};

}  // namespace tpserve::grammar::internal
