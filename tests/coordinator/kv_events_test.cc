// KV events (coordinator/kv_events.h) against the real BlockManager: after a
// random workload with shared prefixes, evictions and a cache rebuilt, a
// subscriber that applied the stream from the start, one that joined late
// (snapshot) and one that replayed from a seq each hold exactly the hashes the
// BlockManager has registered; seqs are gap-free; every removal names a block
// the subscriber held, every store one it did not.
#include "coordinator/kv_events.h"
#include "coordinator/kv_events_zmq.h"

#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/seed.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;

constexpr int32_t kBlockSize = 4;

// What a router keeps: the set of cached hashes, rebuilt from the stream.
struct Subscriber {
  std::set<uint64_t> hashes;
  uint64_t next_seq = 0;  // 0: nothing seen yet
  int64_t removed = 0;    // removals applied (evictions seen)

  void Apply(const v1::KvEventBatch& b) {
    if (b.snapshot()) {
      next_seq = b.seq() + 1;
    } else {
      if (next_seq != 0) {
        EXPECT_EQ(b.seq(), next_seq) << "a gap or a repeat in the stream";
      }
      next_seq = b.seq() + 1;
    }
    for (const v1::KvEvent& e : b.events()) {
      if (e.has_cleared()) hashes.clear();
      for (uint64_t h : e.removed().block_hashes()) {
        EXPECT_EQ(hashes.erase(h), 1u) << "removed " << h << ", never stored";
        ++removed;
      }
      const v1::KvBlockStored& s = e.stored();
      EXPECT_EQ(s.token_ids_size(), s.block_hashes_size() * kBlockSize);
      for (uint64_t h : s.block_hashes()) EXPECT_TRUE(hashes.insert(h).second) << "stored " << h << " twice";
    }
  }
};

struct Live {
  std::vector<int32_t> tokens;
  std::vector<BlockId> table;
  BlockHashChain chain;
};

std::set<uint64_t> Sorted(const std::vector<uint64_t>& v) { return {v.begin(), v.end()}; }

TEST(KvEvents, SubscribersRebuildTheCachedBlocksAfterARandomWorkload) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  // Five shared prefixes of 2..4 blocks over a small vocabulary: prompts share blocks.
  std::vector<std::vector<int32_t>> prefixes(5);
  for (auto& p : prefixes) {
    p.resize(static_cast<size_t>(kBlockSize * (2 + pick(3))));
    for (int32_t& t : p) t = pick(50);
  }
  constexpr int64_t kBlocks = 29;  // odd and small: prompts evict each other's cached blocks
  auto blocks = std::make_unique<BlockManager>(kBlocks, kBlockSize);
  KvEventPublisher publisher(/*dp_rank=*/0, kBlockSize, /*replay_batches=*/64);
  blocks->set_observer(&publisher);

  Subscriber first, late, replayed;
  publisher.Subscribe(0, [&first](const v1::KvEventBatch& b) { first.Apply(b); });
  std::vector<Live> live;
  bool snapshot = false;  // whether `replayed` was sent a snapshot (outlives its subscription's callback)
  for (int op = 0; op < 4000; ++op) {
    if (op == 1500) publisher.Subscribe(0, [&late](const v1::KvEventBatch& b) { late.Apply(b); });
    // A router that lost its stream at op 2400 and comes back at 2500 asking
    // for the batches it missed (held: fewer than 64 flushes in between).
    if (op == 2400) replayed = first;
    if (op == 2500) {
      publisher.Subscribe(replayed.next_seq, [&replayed, &snapshot](const v1::KvEventBatch& b) {
        snapshot = snapshot || b.snapshot();
        replayed.Apply(b);
      });
      EXPECT_FALSE(snapshot) << "the missed batches were held: a replay, not a snapshot";
      EXPECT_EQ(replayed.next_seq, publisher.last_seq() + 1) << "replayed through the last batch";
      EXPECT_EQ(replayed.hashes, first.hashes);
    }
    const int what = pick(100);
    if (what < 35) {  // a new sequence: a shared prefix and its own tail, all computed
      Live s;
      s.tokens = prefixes[static_cast<size_t>(pick(5))];
      for (int k = pick(11); k > 0; --k) s.tokens.push_back(pick(50));
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      if (!blocks->AllocatePrompt(s.tokens, n, s.table)) continue;
      blocks->CommitFullBlocks(s.tokens, n, s.table, s.chain);
      live.push_back(std::move(s));
    } else if (what < 65 && !live.empty()) {  // a decode step of one of them
      Live& s = live[static_cast<size_t>(pick(static_cast<int>(live.size())))];
      s.tokens.push_back(pick(50));
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      if (!blocks->Grow(s.table, n)) {
        s.tokens.pop_back();
        continue;
      }
      blocks->CommitFullBlocks(s.tokens, n, s.table, s.chain);
    } else if (what < 90 && !live.empty()) {  // one ends
      const size_t i = static_cast<size_t>(pick(static_cast<int>(live.size())));
      blocks->Free(live[i].table);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (what < 99) {
      publisher.Flush();  // an engine iteration's end
    } else if (op < 3500) {  // the workers were replaced: a new, empty cache (as EngineLoop::Rebuild)
      live.clear();
      blocks = std::make_unique<BlockManager>(kBlocks, kBlockSize);
      publisher.OnCleared();
      blocks->set_observer(&publisher);
    }
  }
  publisher.Flush();
  const std::set<uint64_t> truth = Sorted(blocks->CachedHashes());
  EXPECT_FALSE(truth.empty());
  EXPECT_GT(first.removed, 0) << "the workload evicted nothing";
  EXPECT_EQ(first.hashes, truth);
  EXPECT_EQ(late.hashes, truth);
  EXPECT_EQ(replayed.hashes, truth);
  EXPECT_EQ(Sorted(publisher.CachedHashes()), truth);
  EXPECT_EQ(first.next_seq, publisher.last_seq() + 1);
  EXPECT_EQ(late.next_seq, publisher.last_seq() + 1);
  EXPECT_EQ(replayed.next_seq, publisher.last_seq() + 1);
}

// A replay starts where asked while the batches are held, else with the
// snapshot; an unsubscribed sink hears nothing more.
TEST(KvEvents, ReplayFromASeqOrASnapshot) {
  KvEventPublisher publisher(/*dp_rank=*/1, kBlockSize, /*replay_batches=*/3);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  for (uint64_t h = 1; h <= 5; ++h) {
    publisher.OnBlockStored(100 + h, h == 1 ? 0 : 100 + h - 1, tokens);
    publisher.Flush();
  }
  publisher.Flush();  // nothing pending: no batch
  ASSERT_EQ(publisher.last_seq(), 5u);
  std::vector<v1::KvEventBatch> got;
  const uint64_t id = publisher.Subscribe(4, [&got](const v1::KvEventBatch& b) { got.push_back(b); });
  ASSERT_EQ(got.size(), 2u);  // seqs 4 and 5, still held
  EXPECT_EQ(got[0].seq(), 4u);
  EXPECT_EQ(got[0].dp_rank(), 1u);
  EXPECT_FALSE(got[0].snapshot());
  EXPECT_EQ(got[0].events(0).stored().parent_block_hash(), 103u);
  got.clear();
  publisher.Subscribe(2, [&got](const v1::KvEventBatch& b) { got.push_back(b); });  // seq 2 is gone
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].snapshot());
  EXPECT_EQ(got[0].seq(), 5u);
  EXPECT_TRUE(got[0].events(0).has_cleared());
  EXPECT_EQ(got[0].events_size(), 6);  // cleared, then the five blocks
  publisher.Unsubscribe(id);
  got.clear();
  publisher.OnBlockRemoved(101);
  publisher.OnBlockRemoved(102);
  publisher.Flush();
  ASSERT_EQ(got.size(), 1u);  // only the second subscriber is left
  EXPECT_EQ(got[0].seq(), 6u);
  ASSERT_EQ(got[0].events_size(), 1);  // both removals in one event
  EXPECT_EQ(got[0].events(0).removed().block_hashes_size(), 2);
}

// Each --dp group's ZeroMQ endpoints, as vLLM offsets its data-parallel
// engines': the port plus the group, a free port each, a suffix for ipc.
TEST(KvEvents, ZmqEndpointPerDataParallelGroup) {
  EXPECT_EQ(ZmqEndpointForGroup("tcp://*:5557", 0, "--kv-events-endpoint").value(), "tcp://*:5557");
  EXPECT_EQ(ZmqEndpointForGroup("tcp://*:5557", 3, "--kv-events-endpoint").value(), "tcp://*:5560");
  EXPECT_EQ(ZmqEndpointForGroup("tcp://[::1]:5558", 1, "--kv-events-endpoint").value(), "tcp://[::1]:5559");
  EXPECT_EQ(ZmqEndpointForGroup("tcp://127.0.0.1:*", 1, "--kv-events-endpoint").value(), "tcp://127.0.0.1:*");
  EXPECT_EQ(ZmqEndpointForGroup("ipc:///run/kv", 2, "--kv-events-endpoint").value(), "ipc:///run/kv_dp2");
  EXPECT_EQ(ZmqEndpointForGroup("inproc://kv", 1, "--kv-events-endpoint").value(), "inproc://kv_dp1");
  const absl::Status past = ZmqEndpointForGroup("tcp://*:65535", 1, "--kv-events-replay-endpoint").status();
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("--kv-events-replay-endpoint: port '65535'"), std::string::npos) << past.message();
  const absl::Status no_port = ZmqEndpointForGroup("tcp://host", 1, "--kv-events-endpoint").status();
  EXPECT_EQ(no_port.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_port.message().find("--kv-events-endpoint"), std::string::npos) << no_port.message();
  EXPECT_EQ(ZmqEndpointForGroup("udp://x:1", 1, "--kv-events-endpoint").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ZmqEndpointForGroup("udp://x:1", 0, "--kv-events-endpoint").value(), "udp://x:1");  // group 0: as given
}

}  // namespace
}  // namespace tpserve
