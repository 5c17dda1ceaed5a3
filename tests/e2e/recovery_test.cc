// End to end, real processes: the service recovers from a lost worker
// (README, "Operations"). The running request ends UNAVAILABLE naming the
// rank; a request that was only queued waits and then gets exactly the tokens
// it gets on a healthy server; the service serves again, with --spawn-workers
// by restarting its group, with workers started by the user by accepting a
// new complete group (the survivors of the old one are sent away).
#include <signal.h>

#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = MakeModel(dir_.path(), "qwen3", {"--seed", "11", "--max-pos", "4096"}); }

  static v1::GenerateRequest Queued() {
    v1::GenerateRequest r = Greedy(8);
    r.set_prompt("waiting its turn");
    return r;
  }

  // With one request at a time (--max-num-seqs 1): a long request runs, a
  // second waits behind it, then `lose` takes a worker away and `replace`
  // brings a new group. Checks every outcome; `stub` serves again afterwards.
  void LoseAWorkerWhileOneRunsAndOneWaits(v1::Generation::Stub& stub, Process& coordinator,
                                          const std::function<void()>& lose,
                                          const std::function<void()>& replace) {
    const GenerateOutcome reference = Generate(stub, Queued());
    ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();

    grpc::ClientContext running_context;
    v1::GenerateRequest long_request = Greedy(4000);
    long_request.set_prompt("count forever");
    auto running = stub.Generate(&running_context, long_request);
    v1::GenerateResponse first;
    ASSERT_TRUE(running->Read(&first));
    GenerateOutcome queued;
    std::thread waiter([&] { queued = Generate(stub, Queued()); });
    for (int i = 0; i < 1000 && ServerInfo(stub).waiting() == 0; ++i) absl::SleepFor(absl::Milliseconds(5));
    const size_t mark = coordinator.Log().size();

    lose();
    v1::GenerateResponse r;
    while (running->Read(&r)) {
    }
    const grpc::Status lost = running->Finish();
    EXPECT_EQ(lost.error_code(), grpc::StatusCode::UNAVAILABLE) << lost.error_message();
    EXPECT_NE(lost.error_message().find("worker rank 1"), std::string::npos) << lost.error_message();
    replace();

    AwaitLine(coordinator, "tpserve-coordinator: ready (recovered", absl::Seconds(90), mark);
    waiter.join();
    EXPECT_TRUE(queued.status.ok()) << "a queued request is not lost: " << queued.status.error_message();
    EXPECT_EQ(queued.tokens, reference.tokens) << "the queued request ran on the new group as on the old";
    ASSERT_TRUE(AwaitServing(stub));
    const GenerateOutcome after = Generate(stub, Queued());
    EXPECT_TRUE(after.status.ok()) << after.status.error_message();
    EXPECT_EQ(after.tokens, reference.tokens);
    const v1::ServerInfo info = ServerInfo(stub);
    EXPECT_EQ(info.running(), 0u);
    EXPECT_EQ(info.free_blocks(), info.num_blocks()) << "every block is free again";
  }

  TempDir dir_;
  std::string model_;
};

TEST_F(RecoveryTest, SpawnedWorkersAreRestartedAfterOneIsKilled) {
  Coordinator c = StartCoordinator(model_, 2, dir_.path() + "/coordinator.log", {"--max-num-seqs", "1"});
  ASSERT_TRUE(c.stub);
  const int old_pid = WorkerPid(ServerInfo(*c.stub), 1);
  ASSERT_GT(old_pid, 0);
  LoseAWorkerWhileOneRunsAndOneWaits(
      *c.stub, *c.process, [&] { ASSERT_EQ(kill(old_pid, SIGKILL), 0); }, [] {});
  const int new_pid = WorkerPid(ServerInfo(*c.stub), 1);
  EXPECT_GT(new_pid, 0);
  EXPECT_NE(new_pid, old_pid) << "rank 1 is a new process";
}

TEST_F(RecoveryTest, WorkersStartedByTheUserAreReplacedByANewGroup) {
  Process coordinator({BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp", "2",
                       "--listen", "127.0.0.1:0", "--worker-timeout", "60s", "--max-num-seqs", "1"},
                      dir_.path() + "/coordinator.log");
  const std::string workers = AwaitLine(coordinator, "tpserve-coordinator: workers connect to ");
  const std::string address = AwaitLine(coordinator, "serving tpserve.v1.Generation on ");
  ASSERT_FALSE(workers.empty());
  std::unique_ptr<Process> rank0 = StartWorker(workers, 0, 2, dir_.path() + "/rank0.log");
  std::unique_ptr<Process> rank1 = StartWorker(workers, 1, 2, dir_.path() + "/rank1.log");
  AwaitLine(coordinator, "tpserve-coordinator: ready");
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  std::unique_ptr<Process> new0, new1;
  LoseAWorkerWhileOneRunsAndOneWaits(
      *stub, coordinator, [&] { rank1->Signal(SIGKILL); },
      [&] {
        // Until a new group comes the service says what it needs.
        const grpc::Status waiting = Generate(*stub, Queued()).status;
        EXPECT_EQ(waiting.error_code(), grpc::StatusCode::UNAVAILABLE);
        EXPECT_NE(waiting.error_message().find("start a new group of 2 workers"), std::string::npos)
            << waiting.error_message();
        EXPECT_NE(rank0->Wait(absl::Seconds(30)), -1) << "the surviving rank of the old group is sent away";
        new0 = StartWorker(workers, 0, 2, dir_.path() + "/new0.log");
        new1 = StartWorker(workers, 1, 2, dir_.path() + "/new1.log");
      });
}

// Issue 33, item 11: under tpserve-launch (as under mpirun), a worker killed
// while idle makes its launcher stop the others, whose sessions may end before
// the dead one's is seen to break: the coordinator named a rank the launcher
// stopped in about one idle kill of three (9 of 26 tries with this script).
// The stopped ranks now say so first (WorkerMessage.stopping) and are blamed
// only if no other rank is lost. Each try is a fresh group; every one must
// name rank 2 (a build without the fix passes all 8 with p ~ 0.65^8 = 3%; the
// deterministic case is WorkerPoolTest.ARankItsLauncherStoppedIsNotBlamedForAPeerThatDied).
TEST_F(RecoveryTest, AnIdleWorkerKilledUnderALauncherIsNamedNotTheRanksItStopped) {
  constexpr int kTries = 8;
  for (int t = 0; t < kTries; ++t) {
    SCOPED_TRACE(::testing::Message() << "try " << t);
    const std::string logs = absl::StrCat(dir_.path(), "/try", t);
    Process coordinator({BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp", "4",
                         "--listen", "127.0.0.1:0", "--worker-timeout", "60s"},
                        logs + "-coordinator.log");
    const std::string workers = AwaitLine(coordinator, "tpserve-coordinator: workers connect to ");
    ASSERT_FALSE(workers.empty());
    Process launch({BinaryPath("launcher/tpserve-launch"), "--nproc-per-node", "4", "--",
                    BinaryPath("tools/worker/tpserve-worker"), "--coordinator", workers},
                   logs + "-launch.log");
    AwaitLine(coordinator, "tpserve-coordinator: ready");
    const std::string rank2 = AwaitLine(coordinator, "tpserve-coordinator: worker connected: rank 2: ");
    const size_t at = rank2.rfind("(pid ");
    int pid = 0;
    ASSERT_TRUE(at != std::string::npos && absl::SimpleAtoi(rank2.substr(at + 5, rank2.size() - at - 6), &pid))
        << rank2;
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    const std::string loss = AwaitLine(coordinator, "tpserve-coordinator: worker rank ", absl::Seconds(30));
    EXPECT_EQ(loss.rfind("2 (", 0), 0u) << "named a rank the launcher stopped: worker rank " << loss;
    EXPECT_NE(launch.Wait(absl::Seconds(30)), -1) << "the launcher stops the others and exits";
  }
}

}  // namespace
}  // namespace tpserve::e2e
