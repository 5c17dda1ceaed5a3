// SubscribeKvEvents on a serving coordinator (tp 1, the tiny model, 24 blocks
// of 4 tokens so prompts evict each other's cached blocks): a subscriber from
// the start sees a snapshot, then gap-free batches whose removals name blocks it
// holds and whose stores name blocks it does not; after a seeded workload the
// set it rebuilt equals a new subscriber's snapshot and a replay from seq 1.
// (That the publisher's stream equals the BlockManager's own cache under a
// random workload is tests/coordinator/kv_events_test.cc.) And the same events
// in vLLM's format: a ZeroMQ subscriber that decodes msgpack and fills what it
// missed from the replay socket (kv_events_zmq_check.py) rebuilds the same set;
// at --dp 2 one such subscriber per group, each on its group's sockets.
#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/harness.h"
#include "tests/testing/seed.h"

namespace tpserve::e2e {
namespace {

// A router's view, rebuilt from one stream: per data-parallel group (each
// batch names its dp_rank; seqs are per group).
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

  std::set<uint64_t> hashes(uint32_t group = 0) {
    absl::MutexLock lock(&mu_);
    return groups_[group].hashes;
  }
  int64_t removed(uint32_t group = 0) {
    absl::MutexLock lock(&mu_);
    return groups_[group].removed;
  }
  // [groups] each group's next seq (0: nothing seen yet).
  std::vector<uint64_t> next_seqs(uint32_t groups) {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> next;
    for (uint32_t g = 0; g < groups; ++g) next.push_back(groups_[g].next_seq);
    return next;
  }
  uint64_t snapshot_seq(uint32_t group = 0) {
    absl::MutexLock lock(&mu_);
    return groups_[group].snapshot_seq;
  }

 private:
  struct Group {
    std::set<uint64_t> hashes;
    uint64_t next_seq = 0;
    uint64_t snapshot_seq = 0;
    int64_t removed = 0;
  };

  void Apply(const v1::KvEventBatch& b) {
    absl::MutexLock lock(&mu_);
    Group& g = groups_[b.dp_rank()];
    if (g.next_seq == 0) {
      EXPECT_TRUE(b.snapshot() || b.seq() == 1) << "the stream starts with a snapshot or at seq 1";
      if (b.snapshot()) g.snapshot_seq = b.seq();
    } else {
      EXPECT_FALSE(b.snapshot());
      EXPECT_EQ(b.seq(), g.next_seq) << "a gap in group " << b.dp_rank() << "'s stream";
    }
    g.next_seq = b.seq() + 1;
    for (const v1::KvEvent& e : b.events()) {
      if (e.has_cleared()) g.hashes.clear();
      for (uint64_t h : e.removed().block_hashes()) {
        EXPECT_EQ(g.hashes.erase(h), 1u) << "removed " << h << ", never stored";
        ++g.removed;
      }
      EXPECT_EQ(e.stored().token_ids_size(), e.stored().block_hashes_size() * 4);
      for (uint64_t h : e.stored().block_hashes()) EXPECT_TRUE(g.hashes.insert(h).second) << "stored twice: " << h;
    }
  }

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::KvEventBatch>> reader_;
  std::thread thread_;
  absl::Mutex mu_;
  std::map<uint32_t, Group> groups_ ABSL_GUARDED_BY(mu_);
};

// Waits until the followers have all applied the same last batch of each of
// `groups` groups and no new one came for 300 ms (the engine may finish a
// step after the last response: one step in flight ahead). Returns each
// group's last seq; empty after 10 s.
std::vector<uint64_t> Settle(const std::vector<Follower*>& followers, uint32_t groups = 1) {
  std::vector<uint64_t> seen;
  absl::Time stable_since = absl::Now();
  for (absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline;) {
    const std::vector<uint64_t> next = followers[0]->next_seqs(groups);
    bool same = std::all_of(next.begin(), next.end(), [](uint64_t s) { return s > 0; });
    for (Follower* f : followers) same = same && f->next_seqs(groups) == next;
    if (!same || next != seen) {
      seen = same ? next : std::vector<uint64_t>{};
      stable_since = absl::Now();
    } else if (absl::Now() - stable_since > absl::Milliseconds(300)) {
      std::vector<uint64_t> last;
      for (uint64_t n : next) last.push_back(n - 1);
      return last;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return {};
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
  const std::vector<uint64_t> last = Settle({first.get(), &late, &replayed});
  ASSERT_EQ(last.size(), 1u) << "the followers never agreed on a last batch";
  ASSERT_GT(last[0], 0u);
  EXPECT_GT(late.snapshot_seq(), 0u);
  EXPECT_EQ(replayed.snapshot_seq(), 0u) << "a replay, not a snapshot";
  EXPECT_GT(first->removed(), 0) << "the workload evicted nothing";
  EXPECT_FALSE(late.hashes().empty());
  EXPECT_EQ(first->hashes(), late.hashes());
  EXPECT_EQ(replayed.hashes(), late.hashes());
  first.reset();  // a cancelled stream ends; the server goes on
  EXPECT_GT(ServerInfo(*c.stub).num_blocks(), 0u);
}

// Group `group`'s endpoints from the coordinator's log: "tpserve-coordinator:
// KV events on tcp://127.0.0.1:P (replay tcp://127.0.0.1:Q)", "group G: KV events on ..." for G > 0.
std::pair<std::string, std::string> ZmqEndpoints(const std::string& log, int group) {
  const std::string marker =
      group == 0 ? "tpserve-coordinator: KV events on " : absl::StrCat("group ", group, ": KV events on ");
  const size_t at = log.find(marker);
  if (at == std::string::npos) return {};
  const std::string line = log.substr(at + marker.size(), log.find('\n', at) - at - marker.size());
  std::vector<std::string> words = absl::StrSplit(line, ' ');
  if (words.size() != 3) return {};
  return {words[0], words[2].substr(0, words[2].size() - 1)};
}

// vLLM's format over ZeroMQ with `dp` groups: one subscriber per group
// (kv_events_zmq_check.py on that group's sockets, checking its
// data_parallel_rank) joins after half the workload, fills the first half
// from the replay socket, and rebuilds that group's cached hashes, which must
// equal what a gRPC subscriber's snapshot holds for the group.
void CheckZmqSubscribers(int dp) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  TempDir dir;
  const std::string model = MakeModel(dir.path(), "qwen3");
  std::vector<std::string> flags = kSmallCache;
  for (const char* f : {"--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-replay-endpoint",
                        "tcp://127.0.0.1:*", "--kv-events-topic", "kv"}) {
    flags.push_back(f);
  }
  if (dp > 1) {  // round-robin: both groups fill and evict
    flags.insert(flags.end(), {"--dp", std::to_string(dp), "--dp-routing", "round-robin"});
  }
  Coordinator c = StartCoordinator(model, 1, dir.path() + "/coordinator.log", flags);
  ASSERT_NE(c.stub, nullptr);
  // The first half runs before the subscribers connect: they get those batches from the replay sockets.
  RunWorkload(*c.stub, seed);
  std::vector<std::unique_ptr<Process>> checks;
  for (int g = 0; g < dp; ++g) {
    const auto [pub, replay] = ZmqEndpoints(c.process->Log(), g);
    ASSERT_FALSE(pub.empty() || replay.empty()) << "group " << g << ": " << c.process->Log();
    const std::string base = absl::StrCat(dir.path(), "/dp", g);
    checks.push_back(std::make_unique<Process>(
        std::vector<std::string>{TPSERVE_PYTHON3, TPSERVE_KV_EVENTS_ZMQ_CHECK, pub, replay, base + ".ready",
                                 base + ".stop", base + ".json", std::to_string(g)},
        base + ".log"));
    for (absl::Time deadline = absl::Now() + absl::Seconds(20);
         !std::ifstream(base + ".ready") && absl::Now() < deadline;) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  RunWorkload(*c.stub, seed + 1);
  Follower late(*c.stub);
  const std::vector<uint64_t> last = Settle({&late}, static_cast<uint32_t>(dp));
  ASSERT_EQ(last.size(), static_cast<size_t>(dp)) << "no last batch of every group";
  for (int g = 0; g < dp; ++g) std::ofstream(absl::StrCat(dir.path(), "/dp", g, ".stop")) << "";
  for (int g = 0; g < dp; ++g) {
    SCOPED_TRACE(absl::StrCat("group ", g));
    Process& check = *checks[static_cast<size_t>(g)];
    ASSERT_EQ(check.Wait(absl::Seconds(30)), 0) << check.Log();
    std::ifstream in(absl::StrCat(dir.path(), "/dp", g, ".json"));
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << check.Log();
    EXPECT_EQ(j["last_seq"].get<uint64_t>(), last[static_cast<size_t>(g)]) << j.dump();
    EXPECT_GT(j["replayed"].get<int>(), 0) << "the first half came from the replay socket";
    EXPECT_GT(j["live"].get<int>(), 0);
    EXPECT_GT(j["removed"].get<int>(), 0) << "the workload evicted nothing";
    const std::set<uint64_t> zmq_hashes(j["hashes"].begin(), j["hashes"].end());
    EXPECT_FALSE(zmq_hashes.empty());
    EXPECT_EQ(zmq_hashes, late.hashes(static_cast<uint32_t>(g)));
  }
}

TEST(KvEvents, VllmFormatOverZeroMqWithReplay) { CheckZmqSubscribers(1); }

// --dp 2: each group publishes on its own sockets (ports offset by the group
// as vLLM's, here each a free port), each batch naming its group.
TEST(KvEvents, VllmFormatOverZeroMqForEveryDataParallelGroup) { CheckZmqSubscribers(2); }

}  // namespace
}  // namespace tpserve::e2e
