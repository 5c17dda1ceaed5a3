// SubscribeKvEvents on a serving coordinator (tp 1, the tiny model, 24 blocks
// of 4 tokens so prompts evict each other's cached blocks): a subscriber from
// the start sees a snapshot, then gap-free batches whose removals name blocks it
// holds and whose stores name blocks it does not; after a seeded workload the
// set it rebuilt equals a new subscriber's snapshot and a replay from seq 1.
// (That the publisher's stream equals the BlockManager's own cache under a
// random workload is tests/coordinator/kv_events_test.cc.) And the same events
// in vLLM's format: a ZeroMQ subscriber that decodes msgpack and fills what it
// missed from the replay socket (kv_events_zmq_check.py) rebuilds the same set.
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
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

  std::set<uint64_t> hashes() {
    absl::MutexLock lock(&mu_);
    return hashes_;
  }
  int64_t removed() {
    absl::MutexLock lock(&mu_);
    return removed_;
  }
  uint64_t next_seq() {
    absl::MutexLock lock(&mu_);
    return next_seq_;
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

// Waits until the followers have all applied the same last batch and no new
// one came for 300 ms (the engine may finish a step after the last response:
// one step in flight ahead). Returns that batch's seq; 0 after 10 s.
uint64_t Settle(const std::vector<Follower*>& followers) {
  uint64_t seen = 0;
  absl::Time stable_since = absl::Now();
  for (absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline;) {
    uint64_t next = followers[0]->next_seq();
    bool same = next > 0;
    for (Follower* f : followers) same = same && f->next_seq() == next;
    if (!same || next != seen) {
      seen = same ? next : 0;
      stable_since = absl::Now();
    } else if (absl::Now() - stable_since > absl::Milliseconds(300)) {
      return next - 1;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return 0;
}

// Four shared 12-token prefixes, each of 24 requests its own tail: hits, and
// evictions in 24 blocks of 4 tokens.
void RunWorkload(v1::Generation::Stub& stub, uint64_t seed) {
  std::mt19937_64 rng(seed);
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
    const GenerateOutcome o = Generate(stub, request);
    ASSERT_TRUE(o.completed) << o.status.error_message();
  }
}

const std::vector<std::string> kSmallCache = {"--block-size", "4", "--num-gpu-blocks-override", "24"};

TEST(KvEvents, SubscribersAgreeAfterAWorkloadWithEvictions) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  TempDir dir;
  const std::string model = MakeModel(dir.path(), "qwen3");
  Coordinator c = StartCoordinator(model, 1, dir.path() + "/coordinator.log", kSmallCache);
  ASSERT_NE(c.stub, nullptr);
  auto first = std::make_unique<Follower>(*c.stub);
  RunWorkload(*c.stub, seed);
  if (HasFatalFailure()) return;

  // No request runs now: once the cache holds still, a subscriber from the
  // start, one that began with a snapshot and one that replayed from seq 1
  // (every batch is still held: 1024) hold the same blocks.
  Follower late(*c.stub);
  Follower replayed(*c.stub, /*from_seq=*/1);
  const uint64_t last = Settle({first.get(), &late, &replayed});
  ASSERT_GT(last, 0u) << "the followers never agreed on a last batch";
  EXPECT_GT(late.snapshot_seq(), 0u);
  EXPECT_EQ(replayed.snapshot_seq(), 0u) << "a replay, not a snapshot";
  EXPECT_GT(first->removed(), 0) << "the workload evicted nothing";
  EXPECT_FALSE(late.hashes().empty());
  EXPECT_EQ(first->hashes(), late.hashes());
  EXPECT_EQ(replayed.hashes(), late.hashes());
  first.reset();  // a cancelled stream ends; the server goes on
  EXPECT_GT(ServerInfo(*c.stub).num_blocks(), 0u);
}

// "tpserve-coordinator: KV events on tcp://127.0.0.1:P (replay tcp://127.0.0.1:Q)" in its log.
std::pair<std::string, std::string> ZmqEndpoints(const std::string& log) {
  const std::string marker = "KV events on ";
  const size_t at = log.find(marker);
  if (at == std::string::npos) return {};
  const std::string line = log.substr(at + marker.size(), log.find('\n', at) - at - marker.size());
  std::vector<std::string> words = absl::StrSplit(line, ' ');
  if (words.size() != 3) return {};
  return {words[0], words[2].substr(0, words[2].size() - 1)};
}

TEST(KvEvents, VllmFormatOverZeroMqWithReplay) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  TempDir dir;
  const std::string model = MakeModel(dir.path(), "qwen3");
  std::vector<std::string> flags = kSmallCache;
  for (const char* f : {"--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-replay-endpoint",
                        "tcp://127.0.0.1:*", "--kv-events-topic", "kv"}) {
    flags.push_back(f);
  }
  Coordinator c = StartCoordinator(model, 1, dir.path() + "/coordinator.log", flags);
  ASSERT_NE(c.stub, nullptr);
  const auto [pub, replay] = ZmqEndpoints(c.process->Log());
  ASSERT_FALSE(pub.empty() || replay.empty()) << c.process->Log();
  const std::string ready = dir.path() + "/ready", stop = dir.path() + "/stop", out = dir.path() + "/zmq.json";
  // The first half runs before the subscriber connects: it gets those batches from the replay socket.
  RunWorkload(*c.stub, seed);
  Process check({TPSERVE_PYTHON3, TPSERVE_KV_EVENTS_ZMQ_CHECK, pub, replay, ready, stop, out},
                dir.path() + "/check.log");
  for (absl::Time deadline = absl::Now() + absl::Seconds(20); !std::ifstream(ready) && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  RunWorkload(*c.stub, seed + 1);
  Follower late(*c.stub);
  const uint64_t last = Settle({&late});
  ASSERT_GT(last, 0u);
  std::ofstream(stop) << "";
  ASSERT_EQ(check.Wait(absl::Seconds(30)), 0) << check.Log();
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << check.Log();
  EXPECT_EQ(j["last_seq"].get<uint64_t>(), last) << j.dump();
  EXPECT_GT(j["replayed"].get<int>(), 0) << "the first half came from the replay socket";
  EXPECT_GT(j["live"].get<int>(), 0);
  EXPECT_GT(j["removed"].get<int>(), 0) << "the workload evicted nothing";
  const std::set<uint64_t> zmq_hashes(j["hashes"].begin(), j["hashes"].end());
  EXPECT_EQ(zmq_hashes, late.hashes());
}

}  // namespace
}  // namespace tpserve::e2e
