// The prefix cache's changes as KV events, for routers that index which
// replica (or group) holds which prefix: SubscribeKvEvents on the public API
// (README, "What routers read"; vLLM publishes the same events over ZeroMQ).
//
// The engine thread is the only producer: the BlockManager calls the
// PrefixCacheObserver methods inside its own (stored, removed), the engine
// OnCleared when it rebuilds its cache, and Flush once per iteration, which
// turns what came since into the next batch (seq + 1; none when nothing
// changed) and hands it to every subscriber. The publisher keeps a mirror of
// the cached blocks as of its last batch (hash -> parent, tokens) to give a
// new subscriber the cache as it stands (a snapshot batch), and the last
// `replay_batches` batches to replay from a seq. Sinks are called outside the
// state lock mu_, under deliver_mu_ alone, which orders deliveries (a new
// subscriber's first batches before any later one; none after Unsubscribe
// returns), in seq order; a sink must not block (the gRPC stream queues) nor
// call the publisher.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/dp_router.h"
#include "scheduler/block_manager.h"
#include "tpserve/v1/generation.pb.h"

namespace tpserve {

class KvEventPublisher final : public PrefixCacheObserver {
 public:
  // `dp_rank`: the group whose cache this is; `block_size`: tokens per block.
  KvEventPublisher(int dp_rank, int32_t block_size, size_t replay_batches = 1024);

  // The engine thread (through its BlockManager): appended to the pending batch.
  void OnBlockStored(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) override;
  void OnBlockRemoved(uint64_t hash) override;
  // The engine thread: the cache was dropped whole (a new BlockManager).
  void OnCleared();
  // Also tells `router`'s index of this group's changes (DpRouter::observer
  // and OnCleared for dp_rank; before this publisher's lock, which the router
  // never takes): how the data-parallel router learns which group holds which
  // prefix. Before the engine starts; null: none. Must outlive the publisher's use.
  void FeedRouter(DpRouter* router) { router_ = router; }
  // The engine thread, after each iteration: the pending events, if any,
  // become batch seq + 1 and go to every subscriber.
  void Flush();

  // A subscriber: `sink` gets the first batches (the snapshot, or the replay
  // from `from_seq`: KvEventsRequest) before Subscribe returns, then every
  // flushed batch in order. Returns the id Unsubscribe takes.
  using Sink = std::function<void(const tpserve::v1::KvEventBatch&)>;
  uint64_t Subscribe(uint64_t from_seq, Sink sink);
  // After it returns, the sink is not called again (not from a sink).
  void Unsubscribe(uint64_t id);

  uint64_t last_seq() const;
  // The hashes in the mirror: what a subscriber that applied every batch holds.
  std::vector<uint64_t> CachedHashes() const;

 private:
  struct Cached {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;  // [block_size]
  };
  tpserve::v1::KvEventBatch SnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The mirror after `batch` (applied at Flush).
  void ApplyLocked(const tpserve::v1::KvEventBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `hash` to the pending batch's last stored chain when it continues
  // it (vLLM's form: one BlockStored per run of blocks), else a new one.
  void AppendStored(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int dp_rank_;
  const int32_t block_size_;
  DpRouter* router_ = nullptr;  // FeedRouter; set before the engine thread calls
  const size_t replay_batches_;
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // held while sinks are called
  mutable absl::Mutex mu_;
  tpserve::v1::KvEventBatch pending_ ABSL_GUARDED_BY(mu_);        // events since the last Flush
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;                       // the last flushed batch
  std::deque<tpserve::v1::KvEventBatch> replay_ ABSL_GUARDED_BY(mu_);  // [<= replay_batches_], by seq
  absl::flat_hash_map<uint64_t, Cached> mirror_ ABSL_GUARDED_BY(mu_);  // the cache as of batch seq_
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Sink>> sinks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve
