// Strongly connected components of a graph over 0..n-1 (internal to the
// grammar engine): which rules are recursive. Tarjan's algorithm without
// recursion, so a grammar of max_rules rules needs no deep stack.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve::grammar::internal {

// edges[v]: the nodes v points at. The components come in reverse
// topological order: every node's targets are in its component or an earlier one.
std::vector<std::vector<int32_t>> StronglyConnectedComponents(const std::vector<std::vector<int32_t>>& edges);

}  // namespace tpserve::grammar::internal
