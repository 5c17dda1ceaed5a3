#include "coordinator/kv_events.h"

#include <utility>

#include "absl/time/clock.h"

namespace tpserve {


KvEventPublisher::KvEventPublisher(int dp_rank, int32_t block_size, size_t replay_batches)
    : dp_rank_(dp_rank), block_size_(block_size), replay_batches_(replay_batches) {}

void KvEventPublisher::AppendStored(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  v1::KvBlockStored* stored = nullptr;
  if (pending_.events_size() > 0 && pending_.events().rbegin()->has_stored()) {
    v1::KvBlockStored* last = pending_.mutable_events()->rbegin()->mutable_stored();
    if (parent != 0 && *last->block_hashes().rbegin() == parent) stored = last;  // continues its chain
  }
  if (stored == nullptr) {
    stored = pending_.add_events()->mutable_stored();
    stored->set_block_size(static_cast<uint32_t>(block_size_));
    if (parent != 0) stored->set_parent_block_hash(parent);
  }
  stored->add_block_hashes(hash);
  for (int32_t t : tokens) stored->add_token_ids(static_cast<uint32_t>(t));
}

void KvEventPublisher::OnBlockStored(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) {
  if (router_ != nullptr) router_->observer(dp_rank_)->OnBlockStored(hash, parent_hash, tokens);
  absl::MutexLock lock(&mu_);
  AppendStored(hash, parent_hash, tokens);
}

void KvEventPublisher::OnBlockRemoved(uint64_t hash) {
  if (router_ != nullptr) router_->observer(dp_rank_)->OnBlockRemoved(hash);
  absl::MutexLock lock(&mu_);
  v1::KvBlockRemoved* removed = pending_.events_size() > 0 && pending_.events().rbegin()->has_removed()
                                    ? pending_.mutable_events()->rbegin()->mutable_removed()
                                    : pending_.add_events()->mutable_removed();
  removed->add_block_hashes(hash);
}

void KvEventPublisher::OnCleared() {
  if (router_ != nullptr) router_->OnCleared(dp_rank_);
  absl::MutexLock lock(&mu_);
  pending_.add_events()->mutable_cleared();
}

void KvEventPublisher::ApplyLocked(const v1::KvEventBatch& batch) {
  for (const v1::KvEvent& e : batch.events()) {
    if (e.has_cleared()) mirror_.clear();
    if (e.has_removed()) {
      for (uint64_t h : e.removed().block_hashes()) mirror_.erase(h);
    }
    if (e.has_stored()) {
      const v1::KvBlockStored& s = e.stored();
      uint64_t parent = s.has_parent_block_hash() ? s.parent_block_hash() : 0;
      for (int i = 0; i < s.block_hashes_size(); ++i) {
        Cached& c = mirror_[s.block_hashes(i)];
        c.parent = parent;
        c.tokens.assign(s.token_ids().begin() + i * block_size_, s.token_ids().begin() + (i + 1) * block_size_);
        parent = s.block_hashes(i);
      }
    }
  }
}

void KvEventPublisher::Flush() {
  v1::KvEventBatch batch;
  std::vector<std::shared_ptr<Sink>> sinks;
  absl::MutexLock deliver(&deliver_mu_);  // Subscribe and Unsubscribe wait for this batch's deliveries
  {
    absl::MutexLock lock(&mu_);
    if (pending_.events_size() == 0) return;
    batch.Swap(&pending_);
    batch.set_seq(++seq_);
    batch.set_ts(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
    batch.set_dp_rank(static_cast<uint32_t>(dp_rank_));
    ApplyLocked(batch);
    replay_.push_back(batch);
    while (replay_.size() > replay_batches_) replay_.pop_front();
    for (const auto& [id, sink] : sinks_) sinks.push_back(sink);
  }
  for (const std::shared_ptr<Sink>& sink : sinks) (*sink)(batch);
}

v1::KvEventBatch KvEventPublisher::SnapshotLocked() const {
  v1::KvEventBatch snapshot;
  snapshot.set_seq(seq_);
  snapshot.set_ts(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  snapshot.set_dp_rank(static_cast<uint32_t>(dp_rank_));
  snapshot.set_snapshot(true);
  snapshot.add_events()->mutable_cleared();
  for (const auto& [hash, c] : mirror_) {  // one block a BlockStored: the mirror keeps no chain order
    v1::KvBlockStored* stored = snapshot.add_events()->mutable_stored();
    stored->set_block_size(static_cast<uint32_t>(block_size_));
    if (c.parent != 0) stored->set_parent_block_hash(c.parent);
    stored->add_block_hashes(hash);
    for (int32_t t : c.tokens) stored->add_token_ids(static_cast<uint32_t>(t));
  }
  return snapshot;
}

uint64_t KvEventPublisher::Subscribe(uint64_t from_seq, Sink sink) {
  auto shared = std::make_shared<Sink>(std::move(sink));
  std::vector<v1::KvEventBatch> first;
  uint64_t id;
  absl::MutexLock deliver(&deliver_mu_);  // no later batch reaches the sink before these
  {
    absl::MutexLock lock(&mu_);
    const bool replayable = from_seq > 0 && from_seq <= seq_ + 1 &&
                            (from_seq == seq_ + 1 || (!replay_.empty() && replay_.front().seq() <= from_seq));
    if (replayable) {
      for (const v1::KvEventBatch& b : replay_) {
        if (b.seq() >= from_seq) first.push_back(b);
      }
    } else {
      first.push_back(SnapshotLocked());
    }
    id = next_id_++;
    sinks_.emplace(id, shared);
  }
  for (const v1::KvEventBatch& b : first) (*shared)(b);
  return id;
}

void KvEventPublisher::Unsubscribe(uint64_t id) {
  absl::MutexLock deliver(&deliver_mu_);  // after it, the sink is never called again
  absl::MutexLock lock(&mu_);
  sinks_.erase(id);
}

uint64_t KvEventPublisher::last_seq() const {
  absl::MutexLock lock(&mu_);
  return seq_;
}

std::vector<uint64_t> KvEventPublisher::CachedHashes() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> hashes;
  hashes.reserve(mirror_.size());
  for (const auto& [hash, c] : mirror_) hashes.push_back(hash);
  return hashes;
}

}  // namespace tpserve
