// SubscribeKvEvents on a serving coordinator (tp 1, the tiny model, 24 blocks
// of 4 tokens so prompts evict each other's cached blocks): a subscriber from
// the start sees a snapshot, then gap-free batches whose removals name blocks it
// holds and whose stores name blocks it does not; after a seeded workload the
// set it rebuilt equals a new subscriber's snapshot and a replay from seq 1.
// (That the publisher's stream equals the BlockManager's own cache under a
// random workload is tests/coordinator/kv_events_test.cc.)
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tests/e2e/harness.h"
#include "tests/testing/seed.h"

namespace tpserve::e2e {
namespace {

// A router's view, rebuilt from one stream.
class Follower {
 public:
  explicit Follower(v1::Generation::Stub& stub, uint64_t from_seq = 0) {
    v1::KvEventsRequest request;
    request.set_from_seq(from_seq);
    reader_ = stub.SubscribeKvEvents(&context_, request);
    thread_ = std::thread([this] {
      v1::KvEventBatch batch;
      while (reader_->Read(&batch)) Apply(batch);
    });
  }
  ~Follower() {
    context_.TryCancel();
    thread_.join();
    reader_->Finish();
  }

  // Blocks until the follower applied batch `seq` (false after 10 s).
  bool WaitFor(uint64_t seq) {
    absl::MutexLock lock(&mu_);
    auto seen = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return next_seq_ > seq; };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(10));
  }
  std::set<uint64_t> hashes() {
    absl::MutexLock lock(&mu_);
    return hashes_;
  }
  int64_t removed() {
    absl::MutexLock lock(&mu_);
    return removed_;
  }
  uint64_t snapshot_seq() {
    absl::MutexLock lock(&mu_);
    return snapshot_seq_;
  }

 private:
  void Apply(const v1::KvEventBatch& b) {
    absl::MutexLock lock(&mu_);
    if (next_seq_ == 0) {
      EXPECT_TRUE(b.snapshot() || b.seq() == 1) << "the stream starts with a snapshot or at seq 1";
      if (b.snapshot()) snapshot_seq_ = b.seq();
    } else {
      EXPECT_FALSE(b.snapshot());
      EXPECT_EQ(b.seq(), next_seq_) << "a gap in the stream";
    }
    next_seq_ = b.seq() + 1;
    EXPECT_EQ(b.dp_rank(), 0u);
    for (const v1::KvEvent& e : b.events()) {
      if (e.has_cleared()) hashes_.clear();
      for (uint64_t h : e.removed().block_hashes()) {
        EXPECT_EQ(hashes_.erase(h), 1u) << "removed " << h << ", never stored";
        ++removed_;
      }
      EXPECT_EQ(e.stored().token_ids_size(), e.stored().block_hashes_size() * 4);
      for (uint64_t h : e.stored().block_hashes()) EXPECT_TRUE(hashes_.insert(h).second) << "stored twice: " << h;
    }
  }

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::KvEventBatch>> reader_;
  std::thread thread_;
  absl::Mutex mu_;
  std::set<uint64_t> hashes_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t snapshot_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t removed_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(KvEvents, SubscribersAgreeAfterAWorkloadWithEvictions) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string model = MakeModel(dir.path(), "qwen3");
  Coordinator c = StartCoordinator(model, 1, dir.path() + "/coordinator.log",
                                   {"--block-size", "4", "--num-gpu-blocks-override", "24"});
  ASSERT_NE(c.stub, nullptr);
  auto first = std::make_unique<Follower>(*c.stub);

  // Four shared 12-token prefixes, each request its own tail: hits, and evictions.
  std::vector<std::vector<uint32_t>> prefixes(4);
  for (auto& p : prefixes) {
    for (int t = 0; t < 12; ++t) p.push_back(static_cast<uint32_t>(1 + rng() % 400));
  }
  for (int r = 0; r < 24; ++r) {
    v1::GenerateRequest request = Greedy(4);
    for (uint32_t t : prefixes[rng() % prefixes.size()]) request.mutable_prompt_token_ids()->add_ids(t);
    for (int k = static_cast<int>(rng() % 9); k > 0; --k) {
      request.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(1 + rng() % 400));
    }
    const GenerateOutcome o = Generate(*c.stub, request);
    ASSERT_TRUE(o.completed) << o.status.error_message();
  }

  // The cache holds still now (no request runs): a new subscriber's snapshot
  // is as of the last batch, which the first follower then has applied too.
  Follower late(*c.stub);
  ASSERT_TRUE(late.WaitFor(0));
  const uint64_t last = late.snapshot_seq();
  ASSERT_GT(last, 0u);
  ASSERT_TRUE(first->WaitFor(last)) << "the first subscriber never got batch " << last;
  EXPECT_GT(first->removed(), 0) << "the workload evicted nothing";
  EXPECT_FALSE(late.hashes().empty());
  EXPECT_EQ(first->hashes(), late.hashes());
  Follower replayed(*c.stub, /*from_seq=*/1);  // every batch is still held (1024)
  ASSERT_TRUE(replayed.WaitFor(last));
  EXPECT_EQ(replayed.snapshot_seq(), 0u) << "a replay, not a snapshot";
  EXPECT_EQ(replayed.hashes(), late.hashes());
  first.reset();  // a cancelled stream ends; the server goes on
  EXPECT_GT(ServerInfo(*c.stub).num_blocks(), 0u);
}

}  // namespace
}  // namespace tpserve::e2e
