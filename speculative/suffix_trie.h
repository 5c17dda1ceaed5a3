// SuffixTrie: counted token strings of bounded length, the structure behind
// suffix decoding (Snowflake's Arctic Inference; SuffixDecoding, Oliaro et al.
// 2024). A node is a token string of length depth() <= max_depth reached from
// the root by its tokens; count(node) is how many times the string was added,
// continuations(node) the sum of its children's counts (how many of those
// occurrences were followed by another token within max_depth).
//
// Writers add and remove one occurrence of a whole root path at a time (Add,
// Remove), or extend one occurrence by a token (Extend: the incremental form
// that a sequence's appended token uses). Counts only go up along Extend and
// down along Remove, so count(child) <= count(parent); a node whose count
// reaches 0 is freed and its slot reused.
//
// NodeRef names a node together with its slot's generation: a reference held
// across writes (another sequence's match in the shared cache) is Valid only
// while that node lives.
//
// Per node: one edge-map entry ((parent, token) -> child) and 44 bytes of
// node, so memory follows the number of distinct strings, which the callers
// bound (a window of W tokens holds at most W * max_depth strings). Counts are
// 32-bit: the callers hold at most 2^30 tokens.
// BestChild is O(1) except after its best child lost counts, then O(children)
// once. Thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace tpserve::speculative {

class SuffixTrie {
 public:
  static constexpr int32_t kRoot = 0;
  static constexpr int32_t kNone = -1;
  static constexpr int32_t kMaxDepth = 64;

  struct NodeRef {
    int32_t node = kNone;
    uint32_t generation = 0;
  };

  // 1 <= max_depth <= kMaxDepth.
  explicit SuffixTrie(int32_t max_depth);

  int32_t max_depth() const { return max_depth_; }
  // The child of `node` by `token`, or kNone.
  int32_t Child(int32_t node, int32_t token) const;
  // Adds one occurrence of node's string followed by `token`: the child's
  // count and node's continuations go up by one (the child is created at count
  // 1 if new). node's own count is the caller's (it added node's string first;
  // the root's count is not kept).
  // node's depth must be < max_depth. Returns the child.
  int32_t Extend(int32_t node, int32_t token);
  // One occurrence of each prefix of `tokens` (at most max_depth of them) up
  // or down: Add is Extend from the root along the path; Remove undoes one Add
  // of the same tokens (every prefix must be present).
  void Add(std::span<const int32_t> tokens);
  void Remove(std::span<const int32_t> tokens);

  // A child with the largest count, or kNone when node has no children.
  int32_t BestChild(int32_t node);

  int32_t token(int32_t node) const { return nodes_[static_cast<size_t>(node)].token; }
  int32_t depth(int32_t node) const { return nodes_[static_cast<size_t>(node)].depth; }
  int64_t count(int32_t node) const { return nodes_[static_cast<size_t>(node)].count; }
  int64_t continuations(int32_t node) const { return nodes_[static_cast<size_t>(node)].continuations; }

  NodeRef Ref(int32_t node) const { return {node, nodes_[static_cast<size_t>(node)].generation}; }
  bool Valid(NodeRef r) const {
    return r.node >= 0 && static_cast<size_t>(r.node) < nodes_.size() &&
           nodes_[static_cast<size_t>(r.node)].generation == r.generation &&
           nodes_[static_cast<size_t>(r.node)].depth >= 0;
  }

  // Live nodes, the root included.
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size() - free_.size()); }
  // Bytes held: the node slots, the free list and the edge map's slots (what
  // the trie allocated, not what it uses).
  int64_t memory_bytes() const {
    return static_cast<int64_t>(nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(int32_t) +
                                edges_.capacity() * (sizeof(std::pair<const uint64_t, int32_t>) + 1));
  }

  // For tests: calls f(tokens, count) for every live non-root node.
  template <typename F>
  void ForEachString(F&& f) const {
    std::vector<int32_t> path;
    Visit(kRoot, path, f);
  }

 private:
  struct Node {
    int32_t parent = kNone;
    int32_t token = 0;
    int32_t depth = -1;  // -1: a free slot
    uint32_t generation = 0;
    int32_t first_child = kNone, next_sibling = kNone, prev_sibling = kNone;
    int32_t best_child = kNone;  // a child with the largest count, unless best_dirty
    bool best_dirty = false;
    int32_t count = 0;
    int32_t continuations = 0;  // sum of the children's counts
  };
  static uint64_t EdgeKey(int32_t parent, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(token);
  }
  Node& at(int32_t n) { return nodes_[static_cast<size_t>(n)]; }
  int32_t NewChild(int32_t parent, int32_t token);
  // One occurrence of `node` (and so one continuation of its parent) less;
  // frees it at count 0 (it has no children then).
  void Decrement(int32_t node);
  template <typename F>
  void Visit(int32_t node, std::vector<int32_t>& path, F& f) const {
    for (int32_t c = nodes_[static_cast<size_t>(node)].first_child; c != kNone;
         c = nodes_[static_cast<size_t>(c)].next_sibling) {
      path.push_back(nodes_[static_cast<size_t>(c)].token);
      f(std::span<const int32_t>(path), nodes_[static_cast<size_t>(c)].count);
      Visit(c, path, f);
      path.pop_back();
    }
  }

  int32_t max_depth_;
  std::vector<Node> nodes_;   // [slots]; slot 0 is the root
  std::vector<int32_t> free_;  // free slots
  absl::flat_hash_map<uint64_t, int32_t> edges_;  // EdgeKey(parent, token) -> child
};

}  // namespace tpserve::speculative
