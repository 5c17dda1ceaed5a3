// A soak of the service (label `soak`, loopback only): hundreds of concurrent
// streams with random cancellations, deadlines, slow readers and invalid
// requests against a tp = 2 CPU deployment, and one worker killed mid-run
// (the coordinator replaces its group). Afterwards every request has had
// exactly one terminal outcome, every completed greedy request equals its solo
// run (a greedy request fails only with UNAVAILABLE naming the killed rank),
// the service serves again, every KV block is free, and the coordinator's
// memory is back within 10% of what it was after warm-up.
//
// CI runs a short soak; TPSERVE_SOAK_REQUESTS=N (default 256) runs a longer one.
#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

enum class Kind { kGreedy, kCancel, kDeadline, kSlowReader, kInvalid };

struct Outcome {
  Kind kind = Kind::kGreedy;
  int prompt = 0;
  int max_tokens = 0;
  std::vector<int32_t> tokens;
  int completes = 0;  // Complete messages seen
  grpc::Status status;
};

const std::vector<std::string> kPrompts = {"the quick brown fox", "a soak test", "hello hello hello",
                                           "one two three four five six"};
constexpr int kSoloTokens = 24;

v1::GenerateRequest Request(int prompt, int max_tokens) {
  v1::GenerateRequest r = Greedy(max_tokens);
  r.set_prompt(kPrompts[prompt]);
  return r;
}

// Runs one request of `kind` to its end; a slow reader sleeps between reads.
Outcome RunOne(v1::Generation::Stub& stub, Kind kind, std::mt19937& rng) {
  Outcome out;
  out.kind = kind;
  out.prompt = static_cast<int>(rng() % kPrompts.size());
  out.max_tokens = 8 + static_cast<int>(rng() % (kSoloTokens - 7));
  v1::GenerateRequest request = Request(out.prompt, out.max_tokens);
  if (kind == Kind::kSlowReader) request.mutable_stopping()->set_max_tokens(kSoloTokens * 16);
  if (kind == Kind::kInvalid) request.mutable_sampling()->set_temperature(-1);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(
      absl::Now() + (kind == Kind::kDeadline ? absl::Milliseconds(20 + rng() % 200) : absl::Seconds(120))));
  auto reader = stub.Generate(&context, request);
  const int cancel_after = kind == Kind::kCancel ? static_cast<int>(rng() % 4) : -1;
  v1::GenerateResponse response;
  int reads = 0;
  while (reader->Read(&response)) {
    if (response.has_chunk()) {
      for (uint32_t t : response.chunk().token_ids()) out.tokens.push_back(static_cast<int32_t>(t));
    }
    if (response.has_complete()) ++out.completes;
    if (reads++ == cancel_after) context.TryCancel();
    if (kind == Kind::kSlowReader) absl::SleepFor(absl::Milliseconds(30));
  }
  out.status = reader->Finish();
  return out;
}

// `requests` requests of random kinds from 128 client threads at once.
std::vector<Outcome> Soak(v1::Generation::Stub& stub, int requests, uint32_t seed) {
  std::vector<Outcome> outcomes(static_cast<size_t>(requests));
  std::atomic<int> next{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 128; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(seed + static_cast<uint32_t>(t));
      for (int i = next++; i < requests; i = next++) {
        const Kind kind = static_cast<Kind>(rng() % 5);
        outcomes[static_cast<size_t>(i)] = RunOne(stub, kind, rng);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  return outcomes;
}

// One soak request's outcome: exactly one terminal outcome, the status its
// kind allows (any may also have met the killed worker: UNAVAILABLE), and a
// served stream's tokens a prefix of its prompt's solo run.
void CheckOutcome(const Outcome& o, const std::vector<std::vector<int32_t>>& solo) {
  // Exactly one terminal outcome: a Complete on OK, none with an error status
  // (but a deadline passing as the Complete arrives may end the call
  // DEADLINE_EXCEEDED on the client's own timer after it).
  const bool deadline_race = o.kind == Kind::kDeadline && o.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  EXPECT_EQ(o.completes, o.status.ok() ? 1 : deadline_race ? o.completes : 0) << o.status.error_message();
  EXPECT_LE(o.completes, 1);
  switch (o.kind) {
    case Kind::kGreedy:
      if (o.status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        EXPECT_NE(o.status.error_message().find("worker rank 1"), std::string::npos) << o.status.error_message();
        break;
      }
      ASSERT_TRUE(o.status.ok()) << o.status.error_message();
      EXPECT_EQ(o.tokens, std::vector<int32_t>(solo[o.prompt].begin(), solo[o.prompt].begin() + o.max_tokens))
          << "prompt " << o.prompt << ", " << o.max_tokens << " tokens";
      break;
    case Kind::kInvalid:  // refused as invalid, or (first) as unavailable while the group is replaced
      EXPECT_TRUE(o.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                  o.status.error_code() == grpc::StatusCode::UNAVAILABLE)
          << o.status.error_message();
      break;
    // Any of these may also have met the lost worker (UNAVAILABLE).
    case Kind::kCancel:
      EXPECT_TRUE(o.status.ok() || o.status.error_code() == grpc::StatusCode::CANCELLED ||
                  o.status.error_code() == grpc::StatusCode::UNAVAILABLE)
          << o.status.error_message();
      break;
    case Kind::kDeadline:
      EXPECT_TRUE(o.status.ok() || o.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                  o.status.error_code() == grpc::StatusCode::UNAVAILABLE)
          << o.status.error_message();
      break;
    case Kind::kSlowReader:
      EXPECT_TRUE(o.status.ok() || o.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                  o.status.error_code() == grpc::StatusCode::UNAVAILABLE)
          << o.status.error_message();
      break;
  }
  // Any stream that was served produced a prefix of its solo run.
  if (o.kind != Kind::kInvalid && o.kind != Kind::kSlowReader && o.tokens.size() <= solo[o.prompt].size()) {
    EXPECT_TRUE(std::equal(o.tokens.begin(), o.tokens.end(), solo[o.prompt].begin())) << "a prefix of the solo run";
  }
}

TEST(SoakTest, EveryStreamEndsOnceAndTheServerReturnsToIdle) {
  const char* env = std::getenv("TPSERVE_SOAK_REQUESTS");
  int requests = 256;
  if (env != nullptr && !absl::SimpleAtoi(env, &requests)) requests = 256;
  TempDir dir;
  const std::string model = MakeModel(dir.path(), "qwen3", {"--seed", "12", "--max-pos", "4096"});
  Coordinator c = StartCoordinator(model, 2, dir.path() + "/coordinator.log",
                                   {"--max-num-seqs", "16", "--max-queue", "4096", "--max-buffered-chunks", "8"});
  ASSERT_TRUE(c.stub);

  // Solo greedy runs: the reference, and the warm-up before memory is measured.
  std::vector<std::vector<int32_t>> solo;
  for (size_t p = 0; p < kPrompts.size(); ++p) {
    GenerateOutcome o = Generate(*c.stub, Request(static_cast<int>(p), kSoloTokens));
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    solo.push_back(o.tokens);
  }
  const v1::ServerInfo idle = ServerInfo(*c.stub);
  // A first, smaller soak warms the coordinator's allocator and gRPC's caches
  // up; the memory after it is the baseline the full soak must come back to.
  (void)Soak(*c.stub, requests, 7);
  const int pid = c.process->pid();
  const int64_t rss_start = RssKb(pid);
  const int rank1 = WorkerPid(ServerInfo(*c.stub), 1);
  ASSERT_GT(rank1, 0);
  std::thread killer([rank1] {
    absl::SleepFor(absl::Milliseconds(300));
    kill(rank1, SIGKILL);
  });
  const std::vector<Outcome> outcomes = Soak(*c.stub, requests, 1000);
  killer.join();
  ASSERT_TRUE(AwaitServing(*c.stub)) << "the group was not replaced:\n" << c.process->Log();
  EXPECT_NE(WorkerPid(ServerInfo(*c.stub), 1), rank1);

  std::map<grpc::StatusCode, int> codes;
  for (const Outcome& o : outcomes) {
    ++codes[o.status.error_code()];
    CheckOutcome(o, solo);
  }
  for (const auto& [code, n] : codes) std::cout << "soak: status " << code << ": " << n << " requests\n";
  EXPECT_GT(codes[grpc::StatusCode::UNAVAILABLE], 0) << "the killed worker was not noticed";
  GenerateOutcome after = Generate(*c.stub, Request(0, kSoloTokens));
  EXPECT_EQ(after.tokens, solo[0]) << "the new group serves the solo run";

  // Back to idle: nothing running or waiting, every block free.
  v1::ServerInfo info;
  for (int i = 0; i < 200; ++i) {
    info = ServerInfo(*c.stub);
    if (info.running() == 0 && info.waiting() == 0 && info.free_blocks() == info.num_blocks()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(info.running(), 0u);
  EXPECT_EQ(info.waiting(), 0u);
  EXPECT_EQ(info.free_blocks(), info.num_blocks()) << "KV blocks leaked";
  EXPECT_EQ(info.num_blocks(), idle.num_blocks()) << "the new group has the cache the old one had";
  const int64_t rss_end = RssKb(pid);
  std::cout << "soak: coordinator VmRSS " << rss_start << " kB after warm-up, " << rss_end << " kB after "
            << requests << " requests\n";
  EXPECT_LE(rss_end, rss_start + rss_start / 10) << "the coordinator's memory did not come back within 10%";
}

}  // namespace
}  // namespace tpserve::e2e
