// End to end, real processes: the event-driven public front end
// (coordinator/generation_service.cc over coordinator/response_queue.h).
// A client that stops reading is cut off with RESOURCE_EXHAUSTED after
// --max-buffered-chunks responses while other clients are served; 2,000 open
// Generate streams cost the coordinator no thread each; cancelling or timing
// out a stream whose write is stalled, or one still queued, frees its blocks.
#include <dirent.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

// Threads of process `pid` (entries of /proc/PID/task); -1 when unreadable.
int ThreadCount(pid_t pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/task").c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

// Polls GetServerInfo until no request is live and every block is free, up to
// `timeout`; the last answer.
v1::ServerInfo WaitAllFree(v1::Generation::Stub& stub, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::ServerInfo info = ServerInfo(stub);
  while (absl::Now() < deadline &&
         (info.free_blocks() != info.num_blocks() || info.running() != 0 || info.waiting() != 0)) {
    absl::SleepFor(absl::Milliseconds(20));
    info = ServerInfo(stub);
  }
  return info;
}

// A stub on a channel of its own whose client reads ahead little: no BDP
// probing, a 4 KiB stream window. So a stream it does not read stalls the
// server's writes after a few KiB instead of after the default window.
std::unique_ptr<v1::Generation::Stub> NarrowStub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 4096);
  args.SetInt("tpserve.e2e.narrow", 1);  // a channel of its own, not shared with c.stub's
  return v1::Generation::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

// One Generate stream on the client's callback API that reads everything it
// gets (no thread per stream on the client side either).
class Stream final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Stream(v1::Generation::Stub& stub, v1::GenerateRequest request) : request_(std::move(request)) {
    stub.async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }
  void Cancel() { context_.TryCancel(); }
  // The stream's final status, or nullopt when it did not end within `timeout`.
  std::optional<grpc::Status> Wait(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) return std::nullopt;
    return status_;
  }
  bool done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }

 private:
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

class FrontendTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = MakeModel(dir_.path(), "qwen3", {"--seed", "6", "--max-pos", "16384"}); }
  Coordinator Start(const std::vector<std::string>& extra) {
    return StartCoordinator(model_, 2, dir_.path() + "/coordinator.log", extra);
  }
  // A request for `max_tokens` tokens (thousands of steps unless stopped).
  static v1::GenerateRequest Long(const std::string& id, int max_tokens = 16000) {
    v1::GenerateRequest r = Greedy(max_tokens);
    r.set_request_id(id);
    r.set_prompt("count forever");
    return r;
  }

  TempDir dir_;
  std::string model_;
};

TEST_F(FrontendTest, AClientThatStopsReadingIsCutOffWhileOthersAreServed) {
  constexpr int kBound = 16;
  Coordinator c = Start({"--max-buffered-chunks", std::to_string(kBound), "--max-num-seqs", "4"});
  ASSERT_TRUE(c.stub);
  const uint64_t total = ServerInfo(*c.stub).num_blocks();

  std::unique_ptr<v1::Generation::Stub> narrow = NarrowStub(c.address);
  grpc::ClientContext stalled_ctx;
  // Not read, for now. Its writes stall after about 4 KiB (~150 chunks), so
  // it overflows long before its 2000 tokens.
  auto stalled = narrow->Generate(&stalled_ctx, Long("stalled", 2000));
  v1::ServerInfo info;
  for (int i = 0; i < 500 && (info = ServerInfo(*c.stub)).running() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(info.running(), 1u) << "the stalled request never ran";

  // Another client is served normally meanwhile.
  v1::GenerateRequest other = Greedy(40);
  other.set_prompt("another client reads its stream");
  const GenerateOutcome served = Generate(*c.stub, other, absl::Seconds(60));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_TRUE(served.completed);
  EXPECT_EQ(served.tokens.size(), 40u);

  // The stalled request is aborted without its client reading a byte: its
  // blocks come back.
  info = WaitAllFree(*c.stub, absl::Seconds(120));
  EXPECT_EQ(info.free_blocks(), total);
  EXPECT_EQ(info.running(), 0u);

  // When it finally reads: what was in flight, then RESOURCE_EXHAUSTED naming the flag.
  int chunks = 0;
  v1::GenerateResponse r;
  bool completed = false;
  while (stalled->Read(&r)) {
    chunks += r.has_chunk() ? 1 : 0;
    completed = completed || r.has_complete();
  }
  const grpc::Status s = stalled->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("--max-buffered-chunks"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find(absl::StrCat("more than ", kBound, " ")), std::string::npos)
      << s.error_message();
  EXPECT_FALSE(completed);
  EXPECT_LT(chunks, 2000) << "the whole generation was buffered";
  EXPECT_EQ(ServerInfo(*c.stub).free_blocks(), total);
}

TEST_F(FrontendTest, TwoThousandOpenStreamsCostNoThreadEach) {
  constexpr int kStreams = 2000;
  // One sequence runs at a time (16000 steps each), the others wait in the
  // queue: nearly all streams stay open until cancelled.
  Coordinator c = Start({"--max-num-seqs", "1", "--max-queue", "4000", "--max-streams-per-client", "0"});
  ASSERT_TRUE(c.stub);
  const uint64_t total = ServerInfo(*c.stub).num_blocks();
  const int idle_threads = ThreadCount(c.process->pid());
  ASSERT_GT(idle_threads, 0);

  std::vector<std::unique_ptr<Stream>> streams;
  int peak_threads = idle_threads;
  uint32_t peak_open = 0;
  for (int i = 0; i < kStreams + 50; ++i) {  // a few finish while the rest open
    streams.push_back(std::make_unique<Stream>(*c.stub, Long(absl::StrCat("s", i))));
    if (i % 100 == 0) peak_threads = std::max(peak_threads, ThreadCount(c.process->pid()));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline && peak_open < kStreams) {
    const v1::ServerInfo info = ServerInfo(*c.stub);
    peak_open = std::max(peak_open, info.running() + info.waiting());
    peak_threads = std::max(peak_threads, ThreadCount(c.process->pid()));
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (int i = 0; i < 20; ++i) {  // and while they stay open
    peak_threads = std::max(peak_threads, ThreadCount(c.process->pid()));
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_GE(peak_open, static_cast<uint32_t>(kStreams)) << "the streams never were open at once";
  EXPECT_LE(peak_threads, 64) << "coordinator threads with " << peak_open << " open streams";
  std::cerr << "coordinator threads: " << idle_threads << " idle, at most " << peak_threads << " with "
            << peak_open << " open Generate streams\n";

  for (auto& s : streams) s->Cancel();
  for (auto& s : streams) {
    const std::optional<grpc::Status> status = s->Wait(absl::Seconds(60));
    ASSERT_TRUE(status.has_value()) << "a cancelled stream did not end";
  }
  const v1::ServerInfo info = WaitAllFree(*c.stub, absl::Seconds(60));
  EXPECT_EQ(info.free_blocks(), total);
  EXPECT_EQ(info.running(), 0u);
  EXPECT_EQ(info.waiting(), 0u);
}

TEST_F(FrontendTest, CancelAndDeadlineAbortStalledAndQueuedStreams) {
  // Nothing overflows here: the stalled stream's responses pile up in the coordinator.
  Coordinator c = Start({"--max-num-seqs", "1", "--max-buffered-chunks", "100000"});
  ASSERT_TRUE(c.stub);
  const uint64_t total = ServerInfo(*c.stub).num_blocks();
  std::unique_ptr<v1::Generation::Stub> narrow = NarrowStub(c.address);

  // Running, never read: its writes stall (the reactor's turn is in a write).
  grpc::ClientContext running_ctx;
  auto running = narrow->Generate(&running_ctx, Long("running"));
  v1::ServerInfo info;
  for (int i = 0; i < 500 && (info = ServerInfo(*c.stub)).running() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(info.running(), 1u);
  // Queued behind it (--max-num-seqs 1), nothing to write (the turn is parked
  // in the queue): one cancelled, one whose deadline passes.
  grpc::ClientContext queued_ctx;
  auto queued = c.stub->Generate(&queued_ctx, Long("queued"));
  const GenerateOutcome timed = Generate(*c.stub, Long("timed"), absl::Milliseconds(800));
  EXPECT_EQ(timed.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << timed.status.error_message();
  EXPECT_EQ(timed.chunks, 0) << "the timed request was not queued";
  SCOPED_TRACE(::testing::Message() << "running " << ServerInfo(*c.stub).running() << ", waiting "
                                    << ServerInfo(*c.stub).waiting());
  queued_ctx.TryCancel();
  running_ctx.TryCancel();
  v1::GenerateResponse r;
  while (queued->Read(&r)) {
  }
  EXPECT_EQ(queued->Finish().error_code(), grpc::StatusCode::CANCELLED);
  while (running->Read(&r)) {
  }
  EXPECT_EQ(running->Finish().error_code(), grpc::StatusCode::CANCELLED);

  info = WaitAllFree(*c.stub, absl::Seconds(30));
  EXPECT_EQ(info.free_blocks(), total);
  EXPECT_EQ(info.running(), 0u);
  EXPECT_EQ(info.waiting(), 0u);
  // And the server still serves.
  v1::GenerateRequest after = Greedy(5);
  after.set_prompt("still here");
  const GenerateOutcome o = Generate(*c.stub, after);
  EXPECT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens.size(), 5u);
}

}  // namespace
}  // namespace tpserve::e2e
