#include "coordinator/dp_router.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tpserve {

absl::StatusOr<DpRouting> ParseDpRouting(absl::string_view name) {
  if (name == "cache-aware") return DpRouting::kCacheAware;
  if (name == "round-robin") return DpRouting::kRoundRobin;
  if (name == "least-load") return DpRouting::kLeastLoad;
  return absl::InvalidArgumentError(absl::StrCat(
      "--dp-routing: '", name, "' is not a routing policy; use cache-aware, round-robin or least-load"));
}

absl::string_view DpRoutingName(DpRouting policy) {
  switch (policy) {
    case DpRouting::kCacheAware:
      return "cache-aware";
    case DpRouting::kRoundRobin:
      return "round-robin";
    case DpRouting::kLeastLoad:
      return "least-load";
  }
  return "?";
}

absl::Status ValidateDpRouterOptions(const DpRouterOptions& options) {
  if (options.groups < 1 || options.groups > kMaxDpGroups) {
    return absl::InvalidArgumentError(absl::StrCat("--dp: ", options.groups, " groups; use 1 to ", kMaxDpGroups));
  }
  if (options.load_bound < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dp-load-bound: ", options.load_bound, " is negative; use 0 or more requests"));
  }
  if (options.block_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--block-size: ", options.block_size, "; use 1 or more"));
  }
  return absl::OkStatus();
}

// One group's PrefixCacheObserver: the index's stores and removals for it.
class DpRouter::GroupObserver final : public PrefixCacheObserver {
 public:
  GroupObserver(DpRouter& router, int group) : router_(router), group_(group) {}
  void OnBlockStored(uint64_t hash, uint64_t /*parent_hash*/, std::span<const int32_t> /*tokens*/) override {
    router_.Stored(group_, hash);
  }
  void OnBlockRemoved(uint64_t hash) override { router_.Removed(group_, hash); }

 private:
  DpRouter& router_;
  const int group_;
};

DpRouter::DpRouter(DpRouterOptions options)
    : options_(options),
      all_groups_(options.groups >= 64 ? ~uint64_t{0} : (uint64_t{1} << options.groups) - 1),
      loads_(static_cast<size_t>(options.groups), 0),
      available_(all_groups_) {
  const absl::Status valid = ValidateDpRouterOptions(options_);
  TPSERVE_CHECK(valid.ok(), valid.message());
  for (int g = 0; g < options_.groups; ++g) observers_.push_back(std::make_unique<GroupObserver>(*this, g));
}

DpRouter::~DpRouter() = default;

PrefixCacheObserver* DpRouter::observer(int group) {
  TPSERVE_CHECK(group >= 0 && group < options_.groups, "group ", group, " of ", options_.groups);
  return observers_[static_cast<size_t>(group)].get();
}

void DpRouter::Stored(int group, uint64_t hash) {
  absl::MutexLock lock(&mu_);
  index_[hash] |= uint64_t{1} << group;
}

void DpRouter::Removed(int group, uint64_t hash) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  it->second &= ~(uint64_t{1} << group);
  if (it->second == 0) index_.erase(it);
}

void DpRouter::OnCleared(int group) {
  const uint64_t bit = uint64_t{1} << group;
  absl::MutexLock lock(&mu_);
  absl::erase_if(index_, [bit](std::pair<const uint64_t, uint64_t>& e) {
    e.second &= ~bit;
    return e.second == 0;
  });
}

uint64_t DpRouter::DeepestHolders(std::span<const uint64_t> block_hashes, uint64_t groups, int64_t& depth) const {
  uint64_t holders = 0;
  uint64_t alive = groups;
  depth = 0;
  for (const uint64_t hash : block_hashes) {  // stops one block past the deepest any group holds
    auto it = index_.find(hash);
    if (it == index_.end()) break;
    const uint64_t next = it->second & alive;
    if (next == 0) break;
    alive = holders = next;
    ++depth;
  }
  return holders;
}

void DpRouter::SetAvailable(int group, bool available) {
  TPSERVE_CHECK(group >= 0 && group < options_.groups, "group ", group, " of ", options_.groups);
  const uint64_t bit = uint64_t{1} << group;
  absl::MutexLock lock(&mu_);
  available_ = available ? available_ | bit : available_ & ~bit;
}

uint64_t DpRouter::Candidates() const { return available_ != 0 ? available_ : all_groups_; }

int DpRouter::LeastLoaded(uint64_t mask) {
  int best = -1;
  int64_t best_load = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < options_.groups; ++i) {
    const int g = (cursor_ + i) % options_.groups;
    if ((mask >> g & 1) == 0) continue;
    if (loads_[static_cast<size_t>(g)] < best_load) {
      best = g;
      best_load = loads_[static_cast<size_t>(g)];
    }
  }
  TPSERVE_CHECK(best >= 0, "no group in the mask");
  cursor_ = (best + 1) % options_.groups;
  return best;
}

DpRoute DpRouter::Route(std::span<const uint64_t> block_hashes) {
  absl::MutexLock lock(&mu_);
  const uint64_t candidates = Candidates();
  DpRoute route;
  switch (options_.policy) {
    case DpRouting::kRoundRobin:
      for (int i = 0; i < options_.groups; ++i) {  // the next candidate from the cursor
        route.group = (cursor_ + i) % options_.groups;
        if (candidates >> route.group & 1) break;
      }
      cursor_ = (route.group + 1) % options_.groups;
      break;
    case DpRouting::kLeastLoad:
      route.group = LeastLoaded(candidates);
      break;
    case DpRouting::kCacheAware: {
      int64_t depth = 0;
      const uint64_t holders = reads_block_hashes() ? DeepestHolders(block_hashes, candidates, depth) : 1;
      if (holders == 0) {
        route.group = LeastLoaded(candidates);
        break;
      }
      // The least loaded candidate's load, without moving the cursor.
      int64_t min_load = std::numeric_limits<int64_t>::max();
      for (int g = 0; g < options_.groups; ++g) {
        if (candidates >> g & 1) min_load = std::min(min_load, loads_[static_cast<size_t>(g)]);
      }
      const int saved = cursor_;
      const int best = LeastLoaded(holders);
      if (loads_[static_cast<size_t>(best)] - min_load <= options_.load_bound) {
        route = DpRoute{.group = best, .cached_blocks = depth};
      } else {
        cursor_ = saved;
        route.group = LeastLoaded(candidates);
      }
      break;
    }
  }
  ++loads_[static_cast<size_t>(route.group)];
  return route;
}

void DpRouter::Release(int group) {
  absl::MutexLock lock(&mu_);
  int64_t& load = loads_[static_cast<size_t>(group)];
  TPSERVE_CHECK(load > 0, "Release of group ", group, " with nothing routed to it");
  --load;
}

bool DpRouter::available(int group) const {
  absl::MutexLock lock(&mu_);
  return (available_ >> group & 1) != 0;
}

int64_t DpRouter::load(int group) const {
  absl::MutexLock lock(&mu_);
  return loads_[static_cast<size_t>(group)];
}

std::vector<int64_t> DpRouter::CachedPrefixBlocks(std::span<const uint64_t> block_hashes) const {
  std::vector<int64_t> blocks(static_cast<size_t>(options_.groups), 0);
  absl::MutexLock lock(&mu_);
  uint64_t alive = all_groups_;
  for (const uint64_t hash : block_hashes) {
    auto it = index_.find(hash);
    const uint64_t next = it == index_.end() ? 0 : it->second & alive;
    if (next == 0) break;
    for (int g = 0; g < options_.groups; ++g) blocks[static_cast<size_t>(g)] += next >> g & 1;
    alive = next;
  }
  return blocks;
}

size_t DpRouter::indexed_hashes() const {
  absl::MutexLock lock(&mu_);
  return index_.size();
}

}  // namespace tpserve
