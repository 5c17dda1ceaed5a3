// tpserve-worker as real processes against a stand-in coordinator that speaks
// worker.proto: two ranks load a generated model over gloo (rendezvous through
// StoreSet/StoreGet), profile, allocate the KV cache and run steps (chunked
// prefill, decodes, a finished sequence); rank 0's greedy tokens equal the
// offline engine's. Also: a bad step is an error reply and the worker goes on;
// no coordinator, a refused Hello and a coordinator that goes away end the
// worker with exit 1 and a line that says why; SIGTERM ends it with exit 0.
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/protocol_version.h"
#include "proto/step_convert.h"
#include "backend/cpu_backend.h"
#include "gtest/gtest.h"
#include "tests/launcher/test_process.h"
#include "tests/worker/worker_test_util.h"
#include "tests/worker_service/fake_coordinator.h"
#include "worker/engine.h"
#include "tests/testing/seed.h"
#include "tests/testing/step_runner_fixture.h"

namespace tpserve::worker_service_test {
namespace {

using launcher_test::ReadFile;
using launcher_test::StartProcess;
using launcher_test::WaitProcess;
using testing_util::TempDir;

constexpr int32_t kVocab = 301;
constexpr uint32_t kBlockSize = 4;

std::string WorkerBinary() { return std::string(TPSERVE_BINARY_DIR) + "/tools/worker/tpserve-worker"; }

using testing_util::TestSeed;

// A TCP port nothing listens on (bound, then closed).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

int ExitCode(std::optional<int> status) {
  if (!status) return -1000;  // killed at the deadline
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

class WorkerProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 301 --dtype f32 --tie 0 --seed 41");
  }
  static void TearDownTestSuite() { delete dir_; }

  void TearDown() override {
    for (pid_t pid : pids_) {
      if (kill(pid, 0) == 0) kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

  // Starts rank `rank` of `world`; its stderr goes to log(rank).
  pid_t StartWorker(const std::string& address, int rank, int world, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {WorkerBinary(),     "--coordinator", address, "--rank", std::to_string(rank),
                                     "--world-size",     std::to_string(world), "--local-rank", std::to_string(rank),
                                     "--threads", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const pid_t pid = StartProcess(argv, {}, Log(rank) + ".out", Log(rank));
    EXPECT_GT(pid, 0);
    pids_.push_back(pid);
    return pid;
  }
  std::string Log(int rank) const { return (logs_.path() / absl::StrCat("rank", rank, ".err")).string(); }
  // Waits for `pid` (it is then no longer killed in TearDown) and returns its exit code.
  int Wait(pid_t pid, absl::Duration timeout) {
    const int code = ExitCode(WaitProcess(pid, timeout));
    pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
    return code;
  }

  static iv1::CoordinatorMessage LoadCommand(uint32_t tp) {
    iv1::CoordinatorMessage m;
    iv1::Load* load = m.mutable_load();
    load->set_model_dir((dir_->path() / "m").string());
    load->set_backend("cpu");
    load->set_tensor_parallel_size(tp);
    load->set_store_prefix("job-1");
    load->set_block_size(kBlockSize);
    load->set_max_num_batched_tokens(64);
    load->set_max_num_seqs(8);
    load->set_max_model_len(128);
    return m;
  }

  static TempDir* dir_;
  TempDir logs_;
  std::vector<pid_t> pids_;
};
TempDir* WorkerProcessTest::dir_ = nullptr;

// What the stand-in coordinator knows of a sequence (its sampling: Wire()).
using Seq = testing_util::ChunkedSequence;
using testing_util::Chunk;

// The sampling every sequence is sent with: greedy, two alternatives, no seed,
// and prompt_logprobs 0 (proto3's default, what this test always sent).
SamplingParams Wire() {
  SamplingParams s;
  s.temperature = 0;
  s.logprobs = 2;
  s.prompt_logprobs = 0;
  return s;
}

// Two ranks under the stand-in coordinator: each command goes to both, and
// both must reply (their logs are printed when one does not).
class TwoRanks {
 public:
  TwoRanks(FakeCoordinator& coordinator, std::string log0, std::string log1)
      : coordinator_(coordinator), log0_(std::move(log0)), log1_(std::move(log1)) {
    planner_.decode_sampled = false;  // every decode names its token
  }

  std::vector<iv1::WorkerMessage> Run(iv1::CoordinatorMessage m) {
    absl::StatusOr<std::vector<iv1::WorkerMessage>> replies = coordinator_.RunOnAll(std::move(m));
    EXPECT_TRUE(replies.ok()) << replies.status() << "\n" << ReadFile(log0_) << ReadFile(log1_);
    return replies.ok() ? *replies : std::vector<iv1::WorkerMessage>{};
  }
  static void ExpectOk(const std::vector<iv1::WorkerMessage>& replies, const char* what) {
    ASSERT_EQ(replies.size(), 2u) << what;
    for (const iv1::WorkerMessage& r : replies) EXPECT_EQ(r.error(), "") << what;
  }

  // Load, Profile (checking the block size and the cap), AllocateKv of the
  // smaller rank's blocks, WarmUp.
  void Prepare(iv1::CoordinatorMessage load) {
    std::vector<iv1::WorkerMessage> replies = Run(std::move(load));
    ExpectOk(replies, "Load");
    ASSERT_TRUE(replies.size() == 2 && replies[0].has_loaded());
    iv1::CoordinatorMessage profile;
    profile.mutable_profile()->set_gpu_memory_utilization(0.9f);
    replies = Run(profile);
    ExpectOk(replies, "Profile");
    uint64_t blocks = UINT64_MAX;
    for (const iv1::WorkerMessage& r : replies) {
      ASSERT_TRUE(r.has_profile());
      // K and V of 2 layers, 4 tokens, 1 local KV head of 32 floats.
      EXPECT_EQ(r.profile().block_bytes(), 2u * 2 * kBlockSize * 1 * 32 * 4);
      EXPECT_GT(r.profile().max_num_blocks(), 0u);
      EXPECT_LE(r.profile().max_num_blocks(), 8u * 128 / kBlockSize) << "max_num_seqs x max_model_len caps it";
      blocks = std::min(blocks, r.profile().max_num_blocks());
    }
    iv1::CoordinatorMessage allocate;
    allocate.mutable_allocate_kv()->set_num_blocks(blocks);
    ExpectOk(Run(allocate), "AllocateKv");
    iv1::CoordinatorMessage warm;
    warm.mutable_warm_up();
    ExpectOk(Run(warm), "WarmUp");
  }

  // One Step computing n more tokens of each scheduled sequence of `seqs`;
  // rank 0's sampled tokens are appended to their outputs.
  void Step(const std::vector<Chunk>& scheduled, std::span<Seq* const> seqs, std::vector<uint64_t> finished = {}) {
    iv1::CoordinatorMessage m;
    *m.mutable_step() = StepPlanToProto(planner_.Plan(scheduled, std::move(finished)), ++step_id_);
    testing_util::ChunkPlanner::Commit(scheduled);
    std::vector<iv1::WorkerMessage> r = Run(std::move(m));
    ExpectOk(r, "Step");
    if (r.size() != 2) return;
    EXPECT_EQ(r[1].step().tokens_size(), 0) << "only rank 0 samples";
    EXPECT_EQ(r[0].step().step_id(), step_id_);
    for (const iv1::SampledToken& t : r[0].step().tokens()) {
      auto it = std::find_if(seqs.begin(), seqs.end(), [&](const Seq* s) { return s->id == t.seq_id(); });
      ASSERT_NE(it, seqs.end()) << "token for unknown sequence " << t.seq_id();
      Seq* seq = *it;
      EXPECT_EQ(seq->computed, seq->all_size()) << "sampled mid-prefill";
      EXPECT_EQ(t.top_ids_size(), 2) << "logprobs = 2 asks for two alternatives";
      EXPECT_EQ(t.top_ids(0), t.token_id()) << "greedy takes the most likely token";
      EXPECT_LE(t.logprob(), 0.0f);
      seq->output.push_back(t.token_id());
    }
  }

  // Decode steps until every sequence has its max_tokens, each one finished
  // (dropped by the workers) in the step after its last token.
  void DecodeToTheEnd(std::span<Seq* const> seqs) {
    std::vector<uint64_t> finished;
    for (int guard = 0; guard < 20; ++guard) {
      std::vector<Chunk> scheduled;
      for (Seq* s : seqs) {
        if (std::ssize(s->output) < s->max_tokens) {
          scheduled.emplace_back(s, 1);
        } else if (s->known) {
          finished.push_back(s->id);
          s->known = false;
        }
      }
      if (scheduled.empty()) return;
      Step(scheduled, seqs, std::exchange(finished, {}));
    }
  }

 private:
  FakeCoordinator& coordinator_;
  std::string log0_, log1_;
  testing_util::ChunkPlanner planner_{static_cast<int32_t>(kBlockSize), /*first_block=*/1};
  uint64_t step_id_ = 0;
};

// The offline engine's greedy tokens for the sequences' prompts (one process, tp = 1).
std::vector<std::vector<int32_t>> EngineGreedyTokens(const std::filesystem::path& model, std::span<Seq* const> seqs) {
  std::vector<Seq> greedy;
  for (const Seq* s : seqs) {
    greedy.push_back(Seq{.prompt = s->prompt, .max_tokens = s->max_tokens});
    greedy.back().sampling.temperature = 0;
  }
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  std::unique_ptr<Communicator> comm = MakeSoloCommunicator();
  return testing_util::EngineTokens(model, *backend, *comm, greedy, {});
}

void ExpectHellos(const std::vector<iv1::Hello>& hellos, pid_t rank0, pid_t rank1) {
  ASSERT_EQ(hellos.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(hellos[r].rank(), static_cast<uint32_t>(r));
    EXPECT_EQ(hellos[r].world_size(), 2u);
    EXPECT_EQ(hellos[r].local_rank(), static_cast<uint32_t>(r));
    EXPECT_EQ(hellos[r].protocol_version(), kWorkerProtocolVersion);
    EXPECT_EQ(hellos[r].device(), "cpu");
    EXPECT_GT(hellos[r].free_memory(), 0u);
    EXPECT_FALSE(hellos[r].host().empty());
  }
  EXPECT_EQ(hellos[0].pid(), static_cast<uint32_t>(rank0));
  EXPECT_EQ(hellos[1].pid(), static_cast<uint32_t>(rank1));
}

TEST_F(WorkerProcessTest, TwoRanksServeStepsWithTheEnginesGreedyTokens) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  FakeCoordinator coordinator(2);
  const pid_t rank0 = StartWorker(coordinator.address(), 0, 2);
  const pid_t rank1 = StartWorker(coordinator.address(), 1, 2);
  ASSERT_TRUE(coordinator.WaitForWorkers(absl::Seconds(30))) << ReadFile(Log(0)) << ReadFile(Log(1));
  ExpectHellos(coordinator.hellos(), rank0, rank1);
  TwoRanks ranks(coordinator, Log(0), Log(1));
  ranks.Prepare(LoadCommand(2));

  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % kVocab);
    return t;
  };
  Seq a{.id = 11, .prompt = random_tokens(13), .sampling = Wire(), .max_tokens = 6};
  Seq b{.id = 4, .prompt = random_tokens(23), .sampling = Wire(), .max_tokens = 8};
  Seq* const seqs[] = {&a, &b};
  const std::vector<std::vector<int32_t>> want = EngineGreedyTokens(dir_->path() / "m", seqs);
  ASSERT_EQ(want.size(), 2u);

  ranks.Step({{&a, 13}, {&b, 10}}, seqs);  // a whole, b's first chunk (not sampled)
  EXPECT_EQ(a.output.size(), 1u);
  EXPECT_TRUE(b.output.empty());
  ranks.Step({{&a, 1}, {&b, 13}}, seqs);  // a decodes, b's last chunk
  ASSERT_EQ(b.output.size(), 1u);

  // A step the workers cannot apply is an error reply on every rank, and changes nothing.
  iv1::CoordinatorMessage bad;
  bad.mutable_step()->set_step_id(999);
  iv1::ContinuingSequence* ghost = bad.mutable_step()->add_continuing();
  ghost->set_seq_id(12345);
  ghost->add_token_ids(1);
  bad.mutable_step()->add_order(12345);
  for (const iv1::WorkerMessage& r : ranks.Run(bad)) {
    EXPECT_NE(r.error().find("does not hold it"), std::string::npos) << r.error();
  }

  ranks.DecodeToTheEnd(seqs);
  EXPECT_EQ(a.output, want[0]);
  EXPECT_EQ(b.output, want[1]);

  iv1::CoordinatorMessage shutdown;
  shutdown.mutable_shutdown();
  TwoRanks::ExpectOk(ranks.Run(shutdown), "Shutdown");
  EXPECT_EQ(Wait(rank0, absl::Seconds(20)), 0) << ReadFile(Log(0));
  EXPECT_EQ(Wait(rank1, absl::Seconds(20)), 0) << ReadFile(Log(1));
  EXPECT_NE(ReadFile(Log(0)).find("shut down by the coordinator"), std::string::npos) << ReadFile(Log(0));
}

TEST_F(WorkerProcessTest, CommandsOutOfOrderAreErrorRepliesNotCrashes) {
  FakeCoordinator coordinator(1);
  const pid_t pid = StartWorker(coordinator.address(), 0, 1);
  ASSERT_TRUE(coordinator.WaitForWorkers(absl::Seconds(30))) << ReadFile(Log(0));
  iv1::CoordinatorMessage step;
  step.mutable_step()->set_step_id(1);
  absl::StatusOr<std::vector<iv1::WorkerMessage>> r = coordinator.RunOnAll(step);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE((*r)[0].error().find("Step before AllocateKv"), std::string::npos) << (*r)[0].error();
  iv1::CoordinatorMessage load = LoadCommand(1);
  load.mutable_load()->set_backend("tpu");
  r = coordinator.RunOnAll(load);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE((*r)[0].error().find("unknown backend \"tpu\""), std::string::npos) << (*r)[0].error();
  load.mutable_load()->set_backend("cpu");
  load.mutable_load()->set_model_dir((dir_->path() / "missing").string());
  r = coordinator.RunOnAll(load);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE((*r)[0].error().find("missing"), std::string::npos) << (*r)[0].error();
  // Still serving: a good Load works.
  r = coordinator.RunOnAll(LoadCommand(1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].error(), "");
  iv1::CoordinatorMessage shutdown;
  shutdown.mutable_shutdown();
  ASSERT_TRUE(coordinator.RunOnAll(shutdown).ok());
  EXPECT_EQ(Wait(pid, absl::Seconds(20)), 0) << ReadFile(Log(0));
}

TEST_F(WorkerProcessTest, NoCoordinatorIsExitOneNamingTheAddress) {
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  const pid_t pid = StartWorker(address, 0, 1, {"--connect-timeout", "1s"});
  EXPECT_EQ(Wait(pid, absl::Seconds(20)), 1);
  const std::string log = ReadFile(Log(0));
  EXPECT_NE(log.find("the coordinator at " + address + " did not answer within 1s"), std::string::npos) << log;
  EXPECT_NE(log.find("--worker-listen"), std::string::npos) << "names the coordinator's flag: " << log;
}

TEST_F(WorkerProcessTest, AMalformedAddressIsExitTwoNamingWorkerListen) {
  for (const std::string address : {"127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", ":50052", "::1:50052"}) {
    const pid_t pid = StartWorker(address, 0, 1, {"--connect-timeout", "1s"});
    EXPECT_EQ(Wait(pid, absl::Seconds(20)), 2) << address;
    const std::string log = ReadFile(Log(0));
    EXPECT_NE(log.find("is not HOST:PORT"), std::string::npos) << address << ": " << log;
    EXPECT_NE(log.find("--worker-listen"), std::string::npos) << log;
  }
}

TEST_F(WorkerProcessTest, KeepsDiallingACoordinatorThatStartsLate) {
  const int port = FreePort();
  const pid_t pid = StartWorker(absl::StrCat("127.0.0.1:", port), 0, 1, {"--connect-timeout", "30s"});
  absl::SleepFor(absl::Milliseconds(1500));
  FakeCoordinator coordinator(1, port);
  ASSERT_TRUE(coordinator.WaitForWorkers(absl::Seconds(20))) << ReadFile(Log(0));
  iv1::CoordinatorMessage shutdown;
  shutdown.mutable_shutdown();
  ASSERT_TRUE(coordinator.RunOnAll(shutdown).ok());
  EXPECT_EQ(Wait(pid, absl::Seconds(20)), 0) << ReadFile(Log(0));
}

TEST_F(WorkerProcessTest, RefusedHelloIsExitOneWithTheReason) {
  FakeCoordinator coordinator(1, 0, "worker speaks protocol version 1 but this coordinator speaks 2");
  const pid_t pid = StartWorker(coordinator.address(), 0, 1);
  EXPECT_EQ(Wait(pid, absl::Seconds(20)), 1);
  const std::string log = ReadFile(Log(0));
  EXPECT_NE(log.find("this coordinator speaks 2"), std::string::npos) << log;
}

TEST_F(WorkerProcessTest, CoordinatorGoingAwayIsExitOne) {
  auto coordinator = std::make_unique<FakeCoordinator>(1);
  const pid_t pid = StartWorker(coordinator->address(), 0, 1);
  ASSERT_TRUE(coordinator->WaitForWorkers(absl::Seconds(30))) << ReadFile(Log(0));
  ASSERT_TRUE(coordinator->RunOnAll(LoadCommand(1)).ok());
  coordinator.reset();  // the coordinator dies
  EXPECT_EQ(Wait(pid, absl::Seconds(20)), 1);
  const std::string log = ReadFile(Log(0));
  EXPECT_NE(log.find("ended without Shutdown"), std::string::npos) << log;
}

// SIGTERM ends the worker with exit 0, and the coordinator hears why before
// the stream ends (WorkerMessage.stopping): a launcher stops every rank when
// one dies, and the coordinator must not blame a rank it stopped (issue 33,
// item 11).
TEST_F(WorkerProcessTest, SigtermIsACleanExitTheCoordinatorIsToldOf) {
  FakeCoordinator coordinator(1);
  const pid_t pid = StartWorker(coordinator.address(), 0, 1);
  ASSERT_TRUE(coordinator.WaitForWorkers(absl::Seconds(30))) << ReadFile(Log(0));
  kill(pid, SIGTERM);
  EXPECT_EQ(Wait(pid, absl::Seconds(20)), 0) << ReadFile(Log(0));
  EXPECT_NE(ReadFile(Log(0)).find("stopped by a signal"), std::string::npos) << ReadFile(Log(0));
  EXPECT_EQ(coordinator.stopped_by(0), "SIGTERM");
}

}  // namespace
}  // namespace tpserve::worker_service_test
