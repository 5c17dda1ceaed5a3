// The vocabulary's tokens as a trie over their bytes (internal to the grammar
// engine), laid out flat in preorder so a walk is one forward scan that skips
// whole subtrees: node i's subtree is [i, nodes[i].skip). Built once per
// vocabulary; ids the caller leaves out (special ids, stop ids, ids with no
// bytes) are not in it: the matcher allows stop ids itself, never the others.
#pragma once

#include <array>
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

// What a walk needs to take a large subtree whole (lexer_mask.cc): when the
// automaton's state at a node loops on every byte below it, every token
// below stays in that state, so their ids are set as one range of
// token_ids() without visiting the nodes.
struct TrieShortcut {
  std::array<uint64_t, 4> below{};  // the bytes of the nodes strictly below this one
  int32_t tokens_begin = 0;         // their tokens: token_ids()[tokens_begin, tokens_end)
  int32_t tokens_end = 0;
  int32_t height = 0;               // the deepest of them, in bytes below this node
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
  // Node i's shortcut, for nodes with at least kMinShortcutNodes nodes below; else nullptr.
  const TrieShortcut* shortcut(int32_t node) const {
    const int32_t k = shortcut_index_[static_cast<size_t>(node)];
    return k < 0 ? nullptr : &shortcuts_[static_cast<size_t>(k)];
  }
  static constexpr int32_t kMinShortcutNodes = 16;
  size_t MemoryBytes() const {
    return nodes_.size() * (sizeof(TrieNode) + sizeof(int32_t)) + token_ids_.size() * sizeof(int32_t) +
           shortcuts_.size() * sizeof(TrieShortcut);
  }

 private:
  void BuildShortcuts();

  std::vector<TrieNode> nodes_;
  std::vector<int32_t> shortcut_index_;     // [N] into shortcuts_, -1 none
  std::vector<TrieShortcut> shortcuts_;
  std::vector<int32_t> token_ids_;
  std::vector<bool> contains_;
  int max_depth_ = 0;
};

}  // namespace tpserve::grammar::internal
