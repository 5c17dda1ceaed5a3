// EarleyDeriver: scan (the kernel from the origin sets), then one worklist
// pass of completion and prediction over the new set.
#include "grammar/earley.h"

#include <algorithm>

namespace tpserve::grammar::internal {

// derived_many entries per chart set: the memo is searched linearly.
constexpr size_t kMaxDerivedMany = 16;

std::span<const Item> Waiting(const ParserTables& tables, const EarleySet& set, int32_t symbol) {
  auto key = [&](const Item& item) { return tables.next[static_cast<size_t>(item.pos)]; };
  auto lo = std::lower_bound(set.items.begin(), set.items.end(), symbol,
                             [&](const Item& item, int32_t s) { return key(item) < s; });
  auto hi = std::upper_bound(lo, set.items.end(), symbol, [&](int32_t s, const Item& item) { return s < key(item); });
  return {lo, hi};
}

EarleyDeriver::EarleyDeriver(const ParserTables& tables)
    : tables_(tables), predicted_(static_cast<size_t>(tables.num_rules()), 0) {}

void EarleyDeriver::Add(int32_t pos, int32_t origin) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(origin);
  if (seen_.insert(key).second) {
    items_.push_back({pos, origin});
    ++items_made_;
  }
}

// Completion and prediction until nothing new; `out.complete` when the start
// rule completes from set 0.
void EarleyDeriver::Close(const std::vector<ChartSet>& chart, EarleySet& out) {
  ++generation_;
  for (size_t k = 0; k < items_.size(); ++k) {
    const Item item = items_[k];
    const int32_t symbol = tables_.next[static_cast<size_t>(item.pos)];
    if (symbol == kEnd) {
      if (item.origin == kSelf) continue;  // Aycock-Horspool: already skipped where predicted
      const int32_t rule = tables_.rule_of[static_cast<size_t>(item.pos)];
      if (rule == tables_.start_rule && item.origin == 0) out.complete = true;
      const EarleySet& origin = *chart[static_cast<size_t>(item.origin)].set;
      for (const Item& waiting : Waiting(tables_, origin, rule)) {
        Add(waiting.pos + 1, waiting.origin == kSelf ? item.origin : waiting.origin);
      }
    } else if (symbol >= 0) {
      if (tables_.nullable[static_cast<size_t>(symbol)]) Add(item.pos + 1, item.origin);
      if (predicted_[static_cast<size_t>(symbol)] != generation_) {
        predicted_[static_cast<size_t>(symbol)] = generation_;
        for (int32_t s = tables_.rule_first[static_cast<size_t>(symbol)];
             s < tables_.rule_first[static_cast<size_t>(symbol) + 1]; ++s) {
          Add(tables_.starts[static_cast<size_t>(s)], kSelf);
        }
      }
    } else {
      out.terminals.push_back(~symbol);
    }
  }
}

std::shared_ptr<const EarleySet> EarleyDeriver::Finish(EarleySet out) {
  std::sort(items_.begin(), items_.end(), [&](const Item& a, const Item& b) {
    return tables_.next[static_cast<size_t>(a.pos)] < tables_.next[static_cast<size_t>(b.pos)];
  });
  out.items = items_;
  std::sort(out.terminals.begin(), out.terminals.end());
  out.terminals.erase(std::unique(out.terminals.begin(), out.terminals.end()), out.terminals.end());
  for (int32_t t : out.terminals) {
    for (size_t w = 0; w < 4; ++w) out.first_bytes[w] |= tables_.first_bytes[static_cast<size_t>(t)][w];
  }
  items_.clear();
  seen_.clear();
  return std::make_shared<const EarleySet>(std::move(out));
}

std::shared_ptr<const EarleySet> EarleyDeriver::Initial() {
  items_.clear();
  seen_.clear();
  for (int32_t s = tables_.rule_first[static_cast<size_t>(tables_.start_rule)];
       s < tables_.rule_first[static_cast<size_t>(tables_.start_rule) + 1]; ++s) {
    Add(tables_.starts[static_cast<size_t>(s)], kSelf);
  }
  EarleySet out;
  const std::vector<ChartSet> no_chart;
  Close(no_chart, out);  // origins are all kSelf: no completion reads the chart
  out.complete = tables_.nullable[static_cast<size_t>(tables_.start_rule)] != 0;
  return Finish(std::move(out));
}

std::shared_ptr<const EarleySet> EarleyDeriver::Derive(std::vector<ChartSet>& chart,
                                                       std::span<const Completion> completions) {
  std::vector<Completion> sorted;  // the memo's key when several end at once
  if (completions.size() == 1) {
    for (const auto& [terminal, set] : chart[static_cast<size_t>(completions[0].set)].derived) {
      if (terminal == completions[0].terminal) return set;
    }
  } else {
    sorted.assign(completions.begin(), completions.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [key, set] : chart[static_cast<size_t>(sorted.back().set)].derived_many) {
      if (key == sorted) return set;
    }
  }
  items_.clear();
  seen_.clear();
  for (const Completion& c : completions) {
    for (const Item& item : Waiting(tables_, *chart[static_cast<size_t>(c.set)].set, ~c.terminal)) {
      Add(item.pos + 1, item.origin == kSelf ? c.set : item.origin);
    }
  }
  EarleySet out;
  Close(chart, out);
  std::shared_ptr<const EarleySet> set = Finish(std::move(out));
  if (completions.size() == 1) {
    chart[static_cast<size_t>(completions[0].set)].derived.emplace_back(completions[0].terminal, set);
  } else if (!sorted.empty()) {
    auto& memo = chart[static_cast<size_t>(sorted.back().set)].derived_many;
    if (memo.size() < kMaxDerivedMany) memo.emplace_back(std::move(sorted), set);
  }
  return set;
}

}  // namespace tpserve::grammar::internal
