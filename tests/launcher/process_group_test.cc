// LaunchLocal / ProcessGroup with real child processes (/bin/sh scripts that
// write what they see and how they end into files).
#include "launcher/process_group.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/launcher/test_process.h"

namespace tpserve {
namespace {

using launcher_test::EnvValue;
using launcher_test::ReadFile;
using launcher_test::WaitForFiles;
using launcher_test::WaitGone;

class ProcessGroupTest : public ::testing::Test {
 protected:
  ~ProcessGroupTest() override { std::filesystem::remove_all(dir_); }
  std::string dir_ = launcher_test::MakeTempDir();

  // nproc ranks of `/bin/sh -c script`, with D=<temp dir> in their environment.
  LaunchOptions Shell(int nproc, const std::string& script) {
    LaunchOptions o;
    o.nproc_per_node = nproc;
    o.argv = {"/bin/sh", "-c", script};
    o.output = OutputMode::kInherit;
    o.grace = absl::Seconds(5);
    o.extra_env = {"D=" + dir_};
    return o;
  }
  std::vector<std::string> Files(const std::string& stem, int n) {
    std::vector<std::string> files;
    for (int r = 0; r < n; ++r) files.push_back(absl::StrCat(dir_, "/", stem, r));
    return files;
  }
};

TEST_F(ProcessGroupTest, EveryRankSeesItsTorchrunEnvironment) {
  setenv("OMPI_COMM_WORLD_RANK", "6", 1);  // as if the launcher itself ran under mpirun
  LaunchOptions o = Shell(3, "env > $D/env$RANK");
  o.master_addr = "10.1.2.3";
  o.master_port = 4567;
  auto group = LaunchLocal(o);
  unsetenv("OMPI_COMM_WORLD_RANK");
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->size(), 3);
  ASSERT_TRUE(group->Wait().ok());
  for (int r = 0; r < 3; ++r) {
    const std::string env = ReadFile(absl::StrCat(dir_, "/env", r));
    const std::string rs = absl::StrCat(r);
    EXPECT_EQ(EnvValue(env, "RANK"), rs);
    EXPECT_EQ(EnvValue(env, "LOCAL_RANK"), rs);
    EXPECT_EQ(EnvValue(env, "ROLE_RANK"), rs);
    EXPECT_EQ(EnvValue(env, "WORLD_SIZE"), "3");
    EXPECT_EQ(EnvValue(env, "LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(EnvValue(env, "GROUP_RANK"), "0");
    EXPECT_EQ(EnvValue(env, "MASTER_ADDR"), "10.1.2.3");
    EXPECT_EQ(EnvValue(env, "MASTER_PORT"), "4567");
    EXPECT_EQ(EnvValue(env, "TPSERVE_LAUNCHER"), "1");
    EXPECT_EQ(EnvValue(env, "D"), dir_);
    EXPECT_FALSE(EnvValue(env, "OMPI_COMM_WORLD_RANK").has_value());
  }
  const std::vector<RankExit> exits = group->exits();
  ASSERT_EQ(exits.size(), 3u);
  for (const RankExit& e : exits) EXPECT_TRUE(e.ok() && !e.stopped) << e.Describe();
}

TEST_F(ProcessGroupTest, OneFailingRankStopsTheOthersAndIsNamed) {
  std::atomic<int> callbacks{0};
  LaunchOptions o = Shell(3, "if [ $RANK = 1 ]; then exit 3; fi; exec sleep 30");
  o.on_exit = [&](const RankExit&) { ++callbacks; };
  const absl::Time start = absl::Now();
  auto group = LaunchLocal(o);
  ASSERT_TRUE(group.ok()) << group.status();
  const absl::Status s = group->Wait();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4)) << "the sleeping ranks were not stopped by SIGTERM";
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_NE(s.message().find("rank 1 (pid "), std::string::npos) << s;
  EXPECT_NE(s.message().find("exited with status 3; stopped the other 2 ranks"), std::string::npos) << s;
  for (const RankExit& e : group->exits()) {
    if (e.rank == 1) continue;
    EXPECT_TRUE(e.stopped) << e.Describe();
    EXPECT_EQ(e.signal, SIGTERM) << e.Describe();
  }
  EXPECT_EQ(callbacks.load(), 3);
}

TEST_F(ProcessGroupTest, ARankKilledBySignalIsNamedWithTheSignal) {
  auto group = LaunchLocal(Shell(2, "if [ $RANK = 0 ]; then kill -SEGV $$; fi; exec sleep 30"));
  ASSERT_TRUE(group.ok()) << group.status();
  const absl::Status s = group->Wait();
  EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("signal 11 (SIGSEGV)"), std::string::npos) << s;
}

TEST_F(ProcessGroupTest, SignalReachesEveryRank) {
  auto group = LaunchLocal(Shell(3, "trap 'echo $RANK > $D/usr1-$RANK; exit 0' USR1; : > $D/ready$RANK; "
                                    "while :; do sleep 0.05; done"));
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(WaitForFiles(Files("ready", 3), absl::Seconds(5)));
  group->Signal(SIGUSR1);
  EXPECT_TRUE(group->Wait().ok());
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ReadFile(absl::StrCat(dir_, "/usr1-", r)), absl::StrCat(r, "\n"));
}

TEST_F(ProcessGroupTest, StopIsGracefulForRanksThatHandleSigterm) {
  auto group = LaunchLocal(Shell(2, "trap ': > $D/term$RANK; exit 0' TERM; : > $D/ready$RANK; "
                                    "while :; do sleep 0.05; done"));
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(WaitForFiles(Files("ready", 2), absl::Seconds(5)));
  const absl::Time start = absl::Now();
  EXPECT_TRUE(group->Stop(absl::Seconds(5)).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(WaitForFiles(Files("term", 2), absl::ZeroDuration()));
  for (const RankExit& e : group->exits()) EXPECT_TRUE(e.stopped && e.ok() && !e.killed_after_grace);
}

TEST_F(ProcessGroupTest, ARankIgnoringSigtermGetsSigkillAfterTheGracePeriod) {
  auto group = LaunchLocal(Shell(2, "trap '' TERM; : > $D/ready$RANK; if [ $RANK = 1 ]; then exec sleep 30; fi; "
                                    "trap 'exit 0' TERM; while :; do sleep 0.05; done"));
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(WaitForFiles(Files("ready", 2), absl::Seconds(5)));
  const absl::Time start = absl::Now();
  const absl::Status s = group->Stop(absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 1 did not exit within 300ms"), std::string::npos) << s;
  const std::vector<RankExit> exits = group->exits();
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].ok() && !exits[0].killed_after_grace) << exits[0].Describe();
  EXPECT_EQ(exits[1].signal, SIGKILL);
  EXPECT_TRUE(exits[1].killed_after_grace);
}

TEST_F(ProcessGroupTest, StoppingReachesWhatTheRanksStarted) {
  // Each rank's shell starts a background sleep (a grandchild of ours) and waits.
  auto group = LaunchLocal(Shell(2, "sleep 30 & echo $! > $D/child$RANK.tmp; mv $D/child$RANK.tmp $D/child$RANK; wait"));
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(WaitForFiles(Files("child", 2), absl::Seconds(5)));
  EXPECT_TRUE(group->Stop(absl::Seconds(5)).ok());
  for (const std::string& f : Files("child", 2)) {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(f)), &pid)) << ReadFile(f);
    EXPECT_TRUE(WaitGone(pid, absl::Seconds(2))) << "grandchild " << pid << " survived the stop";
  }
}

TEST_F(ProcessGroupTest, DestroyingARunningGroupStopsIt) {
  std::vector<pid_t> pids;
  {
    auto group = LaunchLocal(Shell(2, "exec sleep 30"));
    ASSERT_TRUE(group.ok()) << group.status();
    pids = group->pids();
    EXPECT_FALSE(group->done());
  }
  for (pid_t pid : pids) EXPECT_TRUE(WaitGone(pid, absl::Seconds(1))) << pid;
}

TEST_F(ProcessGroupTest, LogFilesHoldEachRanksOutput) {
  LaunchOptions o = Shell(2, "echo out $RANK; echo err $RANK >&2; printf 'no newline'");
  o.output = OutputMode::kLogFiles;
  o.log_dir = dir_ + "/logs/nested";
  auto group = LaunchLocal(o);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(group->Wait().ok());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ReadFile(absl::StrCat(o.log_dir, "/rank-", r, ".stdout")), absl::StrCat("out ", r, "\nno newline"));
    EXPECT_EQ(ReadFile(absl::StrCat(o.log_dir, "/rank-", r, ".stderr")), absl::StrCat("err ", r, "\n"));
  }
}

TEST_F(ProcessGroupTest, IgnoredSigchldIsReportedNotHung) {
  // With SIGCHLD set to SIG_IGN the kernel reaps the ranks and their status is lost.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ignore, &old);
  auto group = LaunchLocal(Shell(2, "exit 0"));
  absl::Status s = group.ok() ? group->Wait() : group.status();
  sigaction(SIGCHLD, &old, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("unknown status (SIGCHLD is ignored"), std::string::npos) << s;
}

TEST_F(ProcessGroupTest, AProgramThatCannotRunIsAClearErrorBeforeAnyRankStarts) {
  LaunchOptions o = Shell(2, "");
  o.argv = {"tpserve-no-such-program", "--flag"};
  auto missing = LaunchLocal(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'tpserve-no-such-program' not found on PATH"), std::string::npos)
      << missing.status();

  const std::string script = dir_ + "/bad-interpreter";
  std::ofstream(script) << "#!/nonexistent/interpreter\n";
  chmod(script.c_str(), 0755);
  o.argv = {script};
  auto bad = LaunchLocal(o);  // found, but execve fails: reported from the child
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("cannot run '" + script + "'"), std::string::npos) << bad.status();

  o.argv = {"/bin/true"};
  o.nproc_per_node = 0;
  EXPECT_EQ(LaunchLocal(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
