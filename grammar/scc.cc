// Tarjan's strongly connected components with an explicit stack of frames.
#include "grammar/scc.h"

#include <algorithm>
#include <utility>

namespace tpserve::grammar::internal {

std::vector<std::vector<int32_t>> StronglyConnectedComponents(const std::vector<std::vector<int32_t>>& edges) {
  const size_t n = edges.size();
  std::vector<int32_t> index(n, -1), low(n, 0);
  std::vector<uint8_t> on_stack(n, 0);
  std::vector<int32_t> stack;
  std::vector<std::pair<int32_t, size_t>> frames;  // (rule, next edge)
  std::vector<std::vector<int32_t>> out;
  int32_t counter = 0;
  for (size_t root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    frames.emplace_back(static_cast<int32_t>(root), 0);
    while (!frames.empty()) {
      auto& [v, e] = frames.back();
      const auto u = static_cast<size_t>(v);
      if (e == 0 && index[u] < 0) {
        index[u] = low[u] = counter++;
        stack.push_back(v);
        on_stack[u] = 1;
      }
      if (e < edges[u].size()) {
        const auto w = static_cast<size_t>(edges[u][e++]);
        if (index[w] < 0) {
          frames.emplace_back(static_cast<int32_t>(w), 0);
        } else if (on_stack[w]) {
          low[u] = std::min(low[u], index[w]);
        }
        continue;
      }
      if (low[u] == index[u]) {
        std::vector<int32_t> component;
        int32_t w = -1;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[static_cast<size_t>(w)] = 0;
          component.push_back(w);
        } while (w != v);
        out.push_back(std::move(component));
      }
      const int32_t done = v;
      frames.pop_back();
      if (!frames.empty()) {
        const auto p = static_cast<size_t>(frames.back().first);
        low[p] = std::min(low[p], low[static_cast<size_t>(done)]);
      }
    }
  }
  return out;
}

}  // namespace tpserve::grammar::internal
