// End to end, real processes: data-parallel groups in one coordinator
// (`--dp 2`, docs/architecture.md "Data-parallel groups and routing").
// Every request gets from --dp 2 exactly the greedy tokens --dp 1 gives it,
// whichever group the router picks; GetLoads answers one group per dp_rank;
// a killed worker of one group fails only that group's request while the
// other group's request runs to its end, and the group is replaced while the
// other serves; workers started by the user join the group they name.
#include <signal.h>

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

// The pid of group `group`'s rank 0 from ServerInfo's "group G rank 0: host cpu (pid P)"; 0 if absent.
int GroupWorkerPid(const v1::ServerInfo& info, int group) {
  const std::string prefix = absl::StrCat("group ", group, " rank 0:");
  for (const std::string& w : info.workers()) {
    if (w.rfind(prefix, 0) != 0) continue;
    const size_t at = w.find("(pid ");
    int pid = 0;
    if (at != std::string::npos && absl::SimpleAtoi(w.substr(at + 5, w.find(')', at) - at - 5), &pid)) return pid;
  }
  return 0;
}

v1::Loads Loads(v1::Generation::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Loads loads;
  EXPECT_TRUE(stub.GetLoads(&context, v1::LoadsRequest(), &loads).ok());
  return loads;
}

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = MakeModel(dir_.path(), "qwen3", {"--seed", "23", "--max-pos", "4096"}); }

  // Conversations sharing a system prompt, their later turns extending the
  // earlier ones: all sent at once, each request's tokens by index.
  std::vector<std::vector<int32_t>> RunAll(v1::Generation::Stub& stub) {
    std::vector<std::string> prompts;
    for (int c = 0; c < 4; ++c) {
      std::string history = "You are a terse assistant. Conversation " + std::to_string(c) + ":";
      for (int turn = 0; turn < 3; ++turn) {
        history += " question " + std::to_string(turn) + " about item " + std::to_string(c * 7 + turn) + "?";
        prompts.push_back(history);
      }
    }
    std::vector<std::vector<int32_t>> tokens(prompts.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i) {
      threads.emplace_back([&, i] {
        v1::GenerateRequest r = Greedy(12 + static_cast<int>(i % 5));
        r.set_prompt(prompts[i]);
        const GenerateOutcome o = Generate(stub, r);
        EXPECT_TRUE(o.status.ok()) << "request " << i << ": " << o.status.error_message();
        tokens[i] = o.tokens;
      });
    }
    for (std::thread& t : threads) t.join();
    return tokens;
  }

  TempDir dir_;
  std::string model_;
};

TEST_F(DataParallelTest, TwoGroupsGiveEveryRequestTheTokensOfOne) {
  std::vector<std::vector<int32_t>> one;
  {
    Coordinator c = StartCoordinator(model_, 1, dir_.path() + "/dp1.log");
    ASSERT_TRUE(c.stub);
    EXPECT_EQ(Loads(*c.stub).groups_size(), 1);
    one = RunAll(*c.stub);
  }
  for (const std::string routing : {"cache-aware", "round-robin", "least-load"}) {
    SCOPED_TRACE(routing);
    Coordinator c = StartCoordinator(model_, 1, dir_.path() + "/dp2-" + routing + ".log",
                                     {"--dp", "2", "--dp-routing", routing});
    ASSERT_TRUE(c.stub);
    const v1::Loads loads = Loads(*c.stub);
    ASSERT_EQ(loads.groups_size(), 2);
    EXPECT_EQ(loads.groups(1).dp_rank(), 1u);
    EXPECT_TRUE(loads.groups(0).serving() && loads.groups(1).serving());
    const v1::ServerInfo info = ServerInfo(*c.stub);
    EXPECT_GT(GroupWorkerPid(info, 0), 0);
    EXPECT_GT(GroupWorkerPid(info, 1), 0);
    EXPECT_NE(GroupWorkerPid(info, 0), GroupWorkerPid(info, 1));
    {  // SubscribeKvEvents streams every group's cache: a snapshot batch from each first
      grpc::ClientContext events_context;
      events_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::KvEventsRequest from_start;
      from_start.set_from_seq(0);
      auto events = c.stub->SubscribeKvEvents(&events_context, from_start);
      std::set<uint32_t> groups;
      v1::KvEventBatch batch;
      for (int i = 0; i < 2 && events->Read(&batch); ++i) {
        EXPECT_TRUE(batch.snapshot());
        groups.insert(batch.dp_rank());
      }
      EXPECT_EQ(groups, (std::set<uint32_t>{0, 1}));
      events_context.TryCancel();
      (void)events->Finish();
    }
    const std::vector<std::vector<int32_t>> two = RunAll(*c.stub);
    ASSERT_EQ(two.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(two[i], one[i]) << "request " << i;
  }
}

TEST_F(DataParallelTest, AKilledGroupFailsOnlyItsRequestAndIsReplacedWhileTheOtherServes) {
  // Round-robin: the first request goes to group 0, the second to group 1.
  Coordinator c = StartCoordinator(model_, 1, dir_.path() + "/coordinator.log",
                                   {"--dp", "2", "--dp-routing", "round-robin"});
  ASSERT_TRUE(c.stub);
  const int victim = GroupWorkerPid(ServerInfo(*c.stub), 1);
  ASSERT_GT(victim, 0);
  v1::GenerateRequest kept_request = Greedy(600);
  kept_request.set_prompt("group zero keeps counting");
  v1::GenerateRequest lost_request = Greedy(4000);
  lost_request.set_prompt("group one counts forever");
  grpc::ClientContext kept_context, lost_context;
  auto kept = c.stub->Generate(&kept_context, kept_request);
  v1::GenerateResponse r;
  ASSERT_TRUE(kept->Read(&r));
  auto lost = c.stub->Generate(&lost_context, lost_request);
  ASSERT_TRUE(lost->Read(&r));
  const size_t mark = c.process->Log().size();

  ASSERT_EQ(kill(victim, SIGKILL), 0);
  while (lost->Read(&r)) {
  }
  const grpc::Status lost_status = lost->Finish();
  EXPECT_EQ(lost_status.error_code(), grpc::StatusCode::UNAVAILABLE) << lost_status.error_message();
  EXPECT_NE(lost_status.error_message().find("worker rank 0"), std::string::npos) << lost_status.error_message();
  // Group 0's request never noticed.
  uint32_t kept_tokens = 1;
  bool completed = false;
  while (kept->Read(&r)) {
    kept_tokens += static_cast<uint32_t>(r.chunk().token_ids_size());
    completed = completed || r.has_complete();
  }
  const grpc::Status kept_status = kept->Finish();
  EXPECT_TRUE(kept_status.ok()) << kept_status.error_message();
  EXPECT_TRUE(completed);
  EXPECT_EQ(kept_tokens, 600u);

  AwaitLine(*c.process, "tpserve-coordinator: ready (recovered group 1", absl::Seconds(90), mark);
  ASSERT_TRUE(AwaitServing(*c.stub));
  const v1::Loads loads = Loads(*c.stub);
  ASSERT_EQ(loads.groups_size(), 2);
  EXPECT_TRUE(loads.groups(0).serving() && loads.groups(1).serving());
  // Each group's own readiness, and the whole's (tpserve-client health exits 0 on SERVING).
  for (const std::string service : {"tpserve.readiness.dp0", "tpserve.readiness.dp1", "tpserve.readiness"}) {
    EXPECT_EQ(RunCommand({BinaryPath("tools/client/tpserve-client"), "health", "--server", c.address, "--service",
                          service},
                         dir_.path() + "/health.log"),
              0)
        << service;
  }
  EXPECT_NE(RunCommand({BinaryPath("tools/client/tpserve-client"), "health", "--server", c.address, "--service",
                        "tpserve.readiness.dp2"},
                       dir_.path() + "/health.log"),
            0)
      << "no third group";
  const int replaced = GroupWorkerPid(ServerInfo(*c.stub), 1);
  EXPECT_GT(replaced, 0);
  EXPECT_NE(replaced, victim) << "group 1 runs a new worker";
  for (int i = 0; i < 4; ++i) {  // both groups serve again (round-robin alternates)
    v1::GenerateRequest again = Greedy(6);
    again.set_prompt("after the recovery " + std::to_string(i));
    const GenerateOutcome o = Generate(*c.stub, again);
    EXPECT_TRUE(o.status.ok()) << o.status.error_message();
    EXPECT_EQ(o.tokens.size(), 6u);
  }
}

// Workers started by the user name the group they join (issue 30 item 1): a
// worker for group 1 that dials group 0's port is refused, saying both
// groups and which port to dial, and group 0 still waits for its own; one
// worker per group, named by tpserve-worker --dp-rank and by tpserve-launch
// --dp-rank, forms both groups and each serves.
TEST_F(DataParallelTest, ExternalWorkersNameTheirGroupAndTheWrongPortRefusesThem) {
  Process coordinator({BinaryPath("tools/coordinator/tpserve-coordinator"), "--model", model_, "--tp", "1", "--dp",
                       "2", "--dp-routing", "round-robin", "--listen", "127.0.0.1:0", "--worker-timeout", "60s"},
                      dir_.path() + "/coordinator.log");
  const std::string group0 = AwaitLine(coordinator, "tpserve-coordinator: workers connect to ");
  const std::string group1 = AwaitLine(coordinator, "tpserve-coordinator: group 1: workers connect to ");
  const std::string address = AwaitLine(coordinator, "serving tpserve.v1.Generation on ");
  ASSERT_FALSE(group0.empty() || group1.empty() || address.empty());
  EXPECT_NE(coordinator.Log().find("group 1: waiting for 1 workers: mpirun -np 1 tpserve-worker --coordinator " +
                                   group1 + " --dp-rank 1"),
            std::string::npos)
      << coordinator.Log();

  std::unique_ptr<Process> stray =
      StartWorker(group0, 0, 1, dir_.path() + "/stray.log", {"--dp-rank", "1", "--connect-timeout", "10s"});
  EXPECT_EQ(stray->Wait(absl::Seconds(60)), 1) << stray->Log();
  EXPECT_NE(stray->Log().find("names data-parallel group 1 (--dp-rank) but dialled the port of group 0; dial "
                              "group 1's port"),
            std::string::npos)
      << stray->Log();
  EXPECT_NE(coordinator.Log().find("refused a worker"), std::string::npos) << coordinator.Log();

  std::unique_ptr<Process> worker1 = StartWorker(group1, 0, 1, dir_.path() + "/worker1.log", {"--dp-rank", "1"});
  Process worker0({BinaryPath("launcher/tpserve-launch"), "--nproc-per-node", "1", "--dp-rank", "0", "--",
                   BinaryPath("tools/worker/tpserve-worker"), "--coordinator", group0},
                  dir_.path() + "/launch0.log");
  AwaitLine(coordinator, "tpserve-coordinator: ready");
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 2; ++i) {  // round-robin: one request on each group
    v1::GenerateRequest r = Greedy(6);
    r.set_prompt("a group of my own " + std::to_string(i));
    const GenerateOutcome o = Generate(*stub, r);
    EXPECT_TRUE(o.status.ok()) << o.status.error_message();
    EXPECT_EQ(o.tokens.size(), 6u);
  }
  const v1::Loads loads = Loads(*stub);
  ASSERT_EQ(loads.groups_size(), 2);
  EXPECT_TRUE(loads.groups(0).serving() && loads.groups(1).serving());
}

}  // namespace
}  // namespace tpserve::e2e
