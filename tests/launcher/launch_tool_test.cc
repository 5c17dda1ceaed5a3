// tpserve-launch as a process: the environment its ranks read through
// comm/rank_env.h, exit statuses and messages, signal forwarding, output
// prefixing, and no orphans when the launcher itself is killed.
#include <sys/wait.h>

#include <csignal>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/launcher/test_process.h"

namespace tpserve {
namespace {

using launcher_test::ReadFile;
using launcher_test::StartProcess;
using launcher_test::WaitForFiles;
using launcher_test::WaitGone;
using launcher_test::WaitProcess;

class LaunchToolTest : public ::testing::Test {
 protected:
  ~LaunchToolTest() override { std::filesystem::remove_all(dir_); }
  std::string dir_ = launcher_test::MakeTempDir();
  std::string out_ = dir_ + "/launcher.stdout", err_ = dir_ + "/launcher.stderr";

  pid_t Start(std::vector<std::string> flags, const std::vector<std::string>& program,
              const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {TPSERVE_LAUNCH};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), program.begin(), program.end());
    std::vector<std::string> full_env = env;
    full_env.push_back("D=" + dir_);
    return StartProcess(argv, full_env, out_, err_);
  }
  // Runs to the end; the wait status (or -1 at the 8 s deadline).
  int Run(std::vector<std::string> flags, const std::vector<std::string>& program,
          const std::vector<std::string>& env = {}) {
    const pid_t pid = Start(std::move(flags), program, env);
    EXPECT_GT(pid, 0);
    return WaitProcess(pid, absl::Seconds(8)).value_or(-1);
  }
  std::vector<std::string> Files(const std::string& stem, int n) {
    std::vector<std::string> files;
    for (int r = 0; r < n; ++r) files.push_back(absl::StrCat(dir_, "/", stem, r));
    return files;
  }
  std::string Err() { return ReadFile(err_); }
};

TEST_F(LaunchToolTest, RanksReadTheirPlaceThroughRankEnv) {
  // An outer mpirun's variables must not reach the ranks: rank_env.h prefers them.
  const int status = Run({"--nproc-per-node", "3", "--master-port", "29613"}, {TPSERVE_RANK_ENV_CHILD, dir_},
                         {"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=9", "PMI_RANK=4", "PMI_SIZE=8"});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << Err();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ReadFile(absl::StrCat(dir_, "/rankenv", r)), absl::StrCat(r, " 3 ", r, " 3 127.0.0.1 29613 torchrun\n"));
  }
}

TEST_F(LaunchToolTest, PrefixesEachRanksLinesOnItsOwnStream) {
  const int status = Run({"--nproc-per-node", "2"}, {"/bin/sh", "-c", "echo out $RANK; echo err $RANK >&2; printf tail"});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Err();
  const std::string out = ReadFile(out_), err = Err();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(out.find(absl::StrCat("[rank ", r, "] out ", r, "\n")), std::string::npos) << out;
    EXPECT_NE(out.find(absl::StrCat("[rank ", r, "] tail\n")), std::string::npos) << out;
    EXPECT_NE(err.find(absl::StrCat("[rank ", r, "] err ", r, "\n")), std::string::npos) << err;
  }
  EXPECT_EQ(out.find("err"), std::string::npos) << out;
}

TEST_F(LaunchToolTest, AFailingRankStopsTheOthersAndItsStatusIsTheLaunchers) {
  const absl::Time start = absl::Now();
  const int status = Run({"--nproc-per-node", "2", "--no-prefix"},
                         {"/bin/sh", "-c",
                          "if [ $RANK = 1 ]; then until [ -e $D/ready0 ]; do sleep 0.02; done; exit 3; fi; "
                          "trap ': > $D/term$RANK; exit 0' TERM; : > $D/ready$RANK; while :; do sleep 0.05; done"});
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 3) << Err();
  EXPECT_NE(Err().find("rank 1 (pid "), std::string::npos) << Err();
  EXPECT_NE(Err().find("exited with status 3; stopped the other 1 rank"), std::string::npos) << Err();
  EXPECT_TRUE(WaitForFiles(Files("term", 1), absl::ZeroDuration())) << "rank 0 did not get SIGTERM";
}

TEST_F(LaunchToolTest, SigtermReachesEveryRankAndTheLauncherExits) {
  const pid_t pid = Start({"--nproc-per-node", "3"}, {"/bin/sh", "-c",
                                                      "trap 'echo $RANK > $D/term$RANK; exit 0' TERM; "
                                                      ": > $D/ready$RANK; while :; do sleep 0.05; done"});
  ASSERT_TRUE(WaitForFiles(Files("ready", 3), absl::Seconds(5))) << Err();
  kill(pid, SIGTERM);
  const std::optional<int> status = WaitProcess(pid, absl::Seconds(4));
  ASSERT_TRUE(status.has_value()) << "the launcher did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << "\n" << Err();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ReadFile(absl::StrCat(dir_, "/term", r)), absl::StrCat(r, "\n"));
  EXPECT_NE(Err().find("got SIGTERM, forwarding it to 3 ranks"), std::string::npos) << Err();
}

TEST_F(LaunchToolTest, ARankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const pid_t pid = Start({"--nproc-per-node", "2", "--grace-seconds", "0.3"},
                          {"/bin/sh", "-c", "trap '' TERM INT HUP; : > $D/ready$RANK; exec sleep 30"});
  ASSERT_TRUE(WaitForFiles(Files("ready", 2), absl::Seconds(5))) << Err();
  const absl::Time start = absl::Now();
  kill(pid, SIGINT);
  const std::optional<int> status = WaitProcess(pid, absl::Seconds(4));
  ASSERT_TRUE(status.has_value()) << "the launcher did not exit";
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 128 + SIGINT) << *status << "\n" << Err();
  EXPECT_NE(Err().find("did not exit within 300ms of SIGTERM and got SIGKILL"), std::string::npos) << Err();
}

TEST_F(LaunchToolTest, NoRankOutlivesAKilledLauncher) {
  const pid_t pid = Start({"--nproc-per-node", "2"},
                          {"/bin/sh", "-c", "echo $$ > $D/pid$RANK.tmp; mv $D/pid$RANK.tmp $D/pid$RANK; exec sleep 30"});
  ASSERT_TRUE(WaitForFiles(Files("pid", 2), absl::Seconds(5))) << Err();
  kill(pid, SIGKILL);  // no chance to forward anything: PR_SET_PDEATHSIG has to do it
  WaitProcess(pid, absl::Seconds(2));
  for (const std::string& f : Files("pid", 2)) {
    int rank_pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(f)), &rank_pid)) << ReadFile(f);
    EXPECT_TRUE(WaitGone(rank_pid, absl::Seconds(2))) << "rank pid " << rank_pid << " outlived the launcher";
  }
}

TEST_F(LaunchToolTest, AMissingProgramExits127NamingIt) {
  const int status = Run({"--nproc-per-node", "2"}, {"tpserve-no-such-worker", "--coordinator", "x:1"});
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 127);
  EXPECT_NE(Err().find("'tpserve-no-such-worker' not found on PATH"), std::string::npos) << Err();
}

TEST_F(LaunchToolTest, ABadCommandLineExits2WithUsage) {
  const int status = Run({"--nproc-per-node", "two"}, {"/bin/true"});
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(Err().find("--nproc-per-node must be an integer"), std::string::npos) << Err();
  EXPECT_NE(Err().find("usage: tpserve-launch"), std::string::npos) << Err();
}

}  // namespace
}  // namespace tpserve
