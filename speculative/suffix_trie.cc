#include "speculative/suffix_trie.h"

#include <algorithm>

#include "base/check.h"

namespace tpserve::speculative {

SuffixTrie::SuffixTrie(int32_t max_depth) : max_depth_(max_depth) {
  TPSERVE_CHECK(max_depth >= 1 && max_depth <= kMaxDepth, "max_depth = ", max_depth);
  nodes_.push_back(Node{.depth = 0});
}

int32_t SuffixTrie::Child(int32_t node, int32_t token) const {
  auto it = edges_.find(EdgeKey(node, token));
  return it == edges_.end() ? kNone : it->second;
}

int32_t SuffixTrie::NewChild(int32_t parent, int32_t token) {
  int32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
  } else {
    n = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& c = at(n);
  const uint32_t generation = c.generation;
  c = Node{};
  c.generation = generation;
  c.parent = parent;
  c.token = token;
  c.depth = at(parent).depth + 1;
  Node& p = at(parent);
  c.next_sibling = p.first_child;
  if (p.first_child != kNone) at(p.first_child).prev_sibling = n;
  p.first_child = n;
  edges_.emplace(EdgeKey(parent, token), n);
  return n;
}

int32_t SuffixTrie::Extend(int32_t node, int32_t token) {
  TPSERVE_CHECK(at(node).depth >= 0 && at(node).depth < max_depth_, "Extend at depth ", at(node).depth);
  int32_t c = Child(node, token);
  if (c == kNone) c = NewChild(node, token);
  const int32_t count = ++at(c).count;
  Node& p = at(node);
  ++p.continuations;
  if (!p.best_dirty && (p.best_child == kNone || count > at(p.best_child).count)) p.best_child = c;
  return c;
}

void SuffixTrie::Add(std::span<const int32_t> tokens) {
  int32_t node = kRoot;
  const size_t n = std::min(tokens.size(), static_cast<size_t>(max_depth_));
  for (size_t i = 0; i < n; ++i) node = Extend(node, tokens[i]);
}

void SuffixTrie::Remove(std::span<const int32_t> tokens) {
  const size_t n = std::min(tokens.size(), static_cast<size_t>(max_depth_));
  int32_t path[kMaxDepth];
  int32_t node = kRoot;
  for (size_t i = 0; i < n; ++i) {
    node = Child(node, tokens[i]);
    TPSERVE_CHECK(node != kNone, "SuffixTrie::Remove of a string never added");
    path[i] = node;
  }
  // Deepest first, so a node is freed only once its children are.
  for (size_t i = n; i-- > 0;) Decrement(path[i]);
}

void SuffixTrie::Decrement(int32_t node) {
  Node& c = at(node);
  const int32_t parent = c.parent;
  --c.count;
  Node& p = at(parent);
  --p.continuations;
  if (p.best_child == node) p.best_dirty = true;
  if (c.count > 0) return;
  TPSERVE_CHECK(c.first_child == kNone, "SuffixTrie: a node at count 0 still has children");
  if (c.prev_sibling != kNone) at(c.prev_sibling).next_sibling = c.next_sibling;
  else p.first_child = c.next_sibling;
  if (c.next_sibling != kNone) at(c.next_sibling).prev_sibling = c.prev_sibling;
  edges_.erase(EdgeKey(parent, c.token));
  c.depth = -1;
  ++c.generation;
  free_.push_back(node);
}

int32_t SuffixTrie::BestChild(int32_t node) {
  Node& p = at(node);
  if (p.best_dirty) {
    p.best_child = kNone;
    for (int32_t c = p.first_child; c != kNone; c = at(c).next_sibling) {
      if (p.best_child == kNone || at(c).count > at(p.best_child).count) p.best_child = c;
    }
    p.best_dirty = false;
  }
  return p.best_child;
}

}  // namespace tpserve::speculative
