// DpRouter: which data-parallel group a new request goes to
// (docs/architecture.md, "Data-parallel groups and routing"). No gRPC, no
// engine: the coordinator asks it once per request, and each group's prefix
// cache tells it what it holds.
//
//   DpRouter router({.groups = 2, .policy = DpRouting::kCacheAware, .block_size = 16});
//   blocks0.set_observer(router.observer(0));     // each group's BlockManager (or a tee)
//   BlockManager::ExtendBlockHashes(prompt, 16, request.block_hashes);  // once per request
//   DpRoute r = router.Route(request.block_hashes);  // r.group; counted in its load
//   ... the request ends ...
//   router.Release(r.group);
//
// Policies (--dp-routing):
//   round-robin  group 0, 1, .., D-1, 0, ..
//   least-load   the group with the fewest requests routed and not released;
//                ties go to the first at or after a rotating cursor, so equal
//                loads alternate
//   cache-aware  the group holding the longest cached prefix of the prompt
//                (ties: the least loaded of them), unless its load exceeds the
//                least loaded group's by more than `load_bound`; no cached
//                prefix anywhere, or too loaded: least-load (SGLang's
//                cache-aware policy, with its absolute balance threshold)
//
// Prefix ownership: one index, hash -> bitmask of the groups whose prefix
// cache holds a block with that hash (the BlockManager's chained hash, so a
// hash names its whole prefix), fed by each group's PrefixCacheObserver
// calls (stored, removed) and OnCleared. Route takes the prompt's full
// blocks' chained hashes, computed once per request before it
// (BlockManager::ExtendBlockHashes; the chosen group's block manager takes
// the same ones, PreparedRequest::block_hashes), and ANDs their masks in chain
// order until none is left: for a prefix of H blocks held somewhere, H + 1
// lookups whatever D is (D <= 64), no hashing, and no group's cache is
// scanned. A hash collision can only misroute (the group's own BlockManager
// confirms tokens before sharing K/V).
//
// Threads: Route, Release and the observers may be called from any thread
// (each group's observer from its engine thread); one mutex guards the index
// and the loads, a leaf.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/block_manager.h"

namespace tpserve {

enum class DpRouting { kCacheAware, kRoundRobin, kLeastLoad };

// "cache-aware", "round-robin", "least-load"; anything else is
// INVALID_ARGUMENT naming --dp-routing and the three values.
absl::StatusOr<DpRouting> ParseDpRouting(absl::string_view name);
absl::string_view DpRoutingName(DpRouting policy);

inline constexpr int kMaxDpGroups = 64;  // one bit per group in the index

struct DpRouterOptions {
  int groups = 1;  // D, 1 .. kMaxDpGroups
  DpRouting policy = DpRouting::kCacheAware;
  int32_t block_size = 16;  // tokens per KV block, as every group's BlockManager
  // cache-aware: the longest-prefix group is taken while its load is at most
  // the least loaded group's plus this many requests (--dp-load-bound).
  int64_t load_bound = 16;
};

struct DpRoute {
  int group = 0;
  // Leading full blocks of the prompt the chosen group holds, by the index
  // (0 under round-robin and least-load, which do not look).
  int64_t cached_blocks = 0;
};

class DpRouter {
 public:
  // CHECK-fails on options out of range (the flags are checked before: --dp,
  // --dp-load-bound); see ValidateDpRouterOptions.
  explicit DpRouter(DpRouterOptions options);
  ~DpRouter();

  DpRouter(const DpRouter&) = delete;
  DpRouter& operator=(const DpRouter&) = delete;

  // The group for a request whose prompt's full blocks have these chained
  // hashes ([prompt / block_size], BlockManager::ExtendBlockHashes with this
  // router's block_size), by the policy; counted in that group's load until
  // Release. At most one lookup per block, stopping past the deepest held.
  DpRoute Route(std::span<const uint64_t> block_hashes);
  // A request routed to `group` ended (finished, failed or aborted).
  void Release(int group);

  // A group whose workers were lost (false) or are back (true, the start):
  // no policy routes to an unavailable group while another is available;
  // with none available every policy routes as if all were (the group then
  // refuses the request with its own status).
  void SetAvailable(int group, bool available);

  // Whether `group` is available (SetAvailable; all are at the start).
  bool available(int group) const;
  // Requests routed to `group` and not released.
  int64_t load(int group) const;
  // [groups] leading full blocks each group holds of the prompt whose block
  // hashes these are (as for Route), by the index.
  std::vector<int64_t> CachedPrefixBlocks(std::span<const uint64_t> block_hashes) const;
  // Distinct hashes indexed (any group).
  size_t indexed_hashes() const;

  // What group `group`'s prefix cache tells (its BlockManager's observer, or
  // called by the one that is): lives as long as the router.
  PrefixCacheObserver* observer(int group);
  // Group `group`'s cache was dropped whole (a new BlockManager after a
  // recovery). O(indexed hashes); rare.
  void OnCleared(int group);

  const DpRouterOptions& options() const { return options_; }
  // Whether Route reads the block hashes (cache-aware over 2 groups or more);
  // otherwise the request's group hashes its prompt itself.
  bool reads_block_hashes() const { return options_.policy == DpRouting::kCacheAware && options_.groups > 1; }

 private:
  class GroupObserver;

  // The groups holding the prompt's first `depth` full blocks, for the
  // deepest depth any group holds (mask 0 and depth 0 when none holds the first).
  uint64_t DeepestHolders(std::span<const uint64_t> block_hashes, uint64_t groups, int64_t& depth) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The groups a request may go to: the available ones, or all when none is.
  uint64_t Candidates() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The least loaded group among `mask`, ties from the cursor on; advances it.
  int LeastLoaded(uint64_t mask) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Stored(int group, uint64_t hash);
  void Removed(int group, uint64_t hash);

  const DpRouterOptions options_;
  const uint64_t all_groups_;  // the low `groups` bits
  std::vector<std::unique_ptr<GroupObserver>> observers_;  // [groups]
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, uint64_t> index_ ABSL_GUARDED_BY(mu_);  // hash -> groups holding it
  std::vector<int64_t> loads_ ABSL_GUARDED_BY(mu_);                     // [groups]
  int cursor_ ABSL_GUARDED_BY(mu_) = 0;  // round-robin's next; least-load's first tie
  uint64_t available_ ABSL_GUARDED_BY(mu_);  // groups serving (SetAvailable)
};

// INVALID_ARGUMENT naming the flag for a --dp, --dp-load-bound or block size out of range.
absl::Status ValidateDpRouterOptions(const DpRouterOptions& options);

}  // namespace tpserve
