// The harness's deadlines (harness.h): a command that never exits is killed
// and its log printed, with the logs of the processes the test still runs; a
// test past its own deadline is failed with what it was waiting for, and its
// processes are killed.
#include "tests/e2e/harness.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tpserve::e2e {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pid a shell wrote to `path` (waiting for it a little), or 0.
pid_t PidIn(const std::string& path) {
  for (int i = 0; i < 200; ++i) {
    std::string text = Slurp(path);
    int pid = 0;
    if (!text.empty() && text.back() == '\n' && absl::SimpleAtoi(text.substr(0, text.size() - 1), &pid)) return pid;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return 0;
}

bool Gone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {  // killed and reaped by then, or reparented to init and reaped there
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST(HarnessTest, ACommandThatNeverExitsIsKilledWithItsLogAndTheServersPrinted) {
  TempDir dir;
  // A "server" the test still runs: its log goes with the failure too.
  Process server({"sh", "-c", "echo the server says hello; exec sleep 1000"}, dir.path() + "/server.log");
  AwaitLine(server, "the server says ");
  // The command and a child of it in its process group: both die.
  const std::string command_pid = dir.path() + "/command.pid", child_pid = dir.path() + "/child.pid";
  const std::vector<std::string> hang = {
      "sh", "-c",
      absl::StrCat("echo $$ > ", command_pid, "; sleep 1000 & echo $! > ", child_pid,
                   "; echo about to wait forever; wait")};
  ::testing::TestPartResultArray failures;
  int rc = 0;
  const absl::Time start = absl::Now();
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    rc = RunCommand(hang, dir.path() + "/hang.log", absl::Seconds(2));
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(rc, kTimedOut);
  EXPECT_GE(took, absl::Seconds(2));
  EXPECT_LT(took, absl::Seconds(20)) << "killed at its deadline, not later";
  ASSERT_EQ(failures.size(), 1);
  const std::string message = failures.GetTestPartResult(0).message();
  EXPECT_NE(message.find("waited for `sh -c echo $$"), std::string::npos) << message;  // what it waited for
  EXPECT_NE(message.find("to exit (deadline 2s)"), std::string::npos) << message;
  EXPECT_NE(message.find("about to wait forever"), std::string::npos) << message;  // the command's log
  EXPECT_NE(message.find("the server says hello"), std::string::npos) << message;  // the server's
  const pid_t command = PidIn(command_pid), child = PidIn(child_pid);
  ASSERT_GT(command, 0);
  ASSERT_GT(child, 0);
  EXPECT_TRUE(Gone(command));
  EXPECT_TRUE(Gone(child)) << "the command's process group is killed, not only the command";
  // A command that ends in time is untouched.
  EXPECT_EQ(RunCommand({"sh", "-c", "exit 3"}, dir.path() + "/quick.log", absl::Seconds(30)), 3);
}

// A fork that fails (EAGAIN or ENOMEM: a process or memory limit, which the
// sanitized build's many processes reach sooner) fails the test at once,
// naming the command. RunCommand then waited in waitpid(-1, ...), for any
// child: the coordinator the test runs, which does not exit, so the test
// hung until ctest killed it, printing nothing (FailureTest.ClientStreams-
// JsonAndReportsErrors under ASan, issue 28). The server is left alone.
TEST(HarnessTest, ACommandThatCannotStartFailsAtOnceInsteadOfWaitingForAnotherChild) {
  TempDir dir;
  Process server({"sh", "-c", "echo the server is up; exec sleep 1000"}, dir.path() + "/server.log");
  AwaitLine(server, "the server is ");
  ::testing::TestPartResultArray failures;
  int rc = 0;
  const absl::Time start = absl::Now();
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    setenv("TPSERVE_HARNESS_FAIL_FORK", "1", 1);
    rc = RunCommand({"true"}, dir.path() + "/true.log", absl::Seconds(60));
    unsetenv("TPSERVE_HARNESS_FAIL_FORK");
  }
  EXPECT_EQ(rc, kTimedOut);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "no wait for a command that never started";
  ASSERT_EQ(failures.size(), 1);
  const std::string message = failures.GetTestPartResult(0).message();
  EXPECT_NE(message.find("could not start `true`: fork failed: "), std::string::npos) << message;
  EXPECT_NE(message.find("the server is up"), std::string::npos) << message;  // the logs come with it
  EXPECT_EQ(server.Wait(absl::ZeroDuration()), -1) << "the server is still running, not reaped";
  EXPECT_EQ(kill(server.pid(), 0), 0);
}

// tests/e2e/harness_subject.cc (tests that hang on purpose, not run by ctest)
// with TPSERVE_TEST_TIMEOUT=4, a 2 s deadline, on one of its tests; its exit
// status, its output in `log`. Its temporary folders go under `dir` (a subject
// that ends by _exit leaves its own behind).
int RunSubject(const std::string& test, const TempDir& dir, const std::string& log) {
  return RunCommand({"env", "TPSERVE_TEST_TIMEOUT=4", "TMPDIR=" + dir.path(),
                     BinaryPath("tests/e2e/e2e_harness_subject"), "--gtest_filter=HarnessWatchdogSubject." + test},
                    log, absl::Seconds(60));
}

TEST(HarnessTest, ATestPastItsDeadlineFailsSayingWhatItWaitedForAndItsProcessesDie) {
  TempDir dir;
  const std::string log = dir.path() + "/subject.log";
  EXPECT_EQ(RunSubject("BlockedOnItsServer", dir, log), 1);
  const std::string out = Slurp(log);
  EXPECT_NE(out.find("HarnessWatchdogSubject.BlockedOnItsServer ran past its deadline of 2s"), std::string::npos)
      << out;
  EXPECT_NE(out.find("it was waiting for the server to answer (it never will)"), std::string::npos) << out;
  EXPECT_NE(out.find("the server is up"), std::string::npos) << out;  // its process's log
  EXPECT_NE(out.find("[  FAILED  ] HarnessWatchdogSubject.BlockedOnItsServer"), std::string::npos)
      << "the test ended, failed, once its server was killed:\n" << out;
}

TEST(HarnessTest, ATestPastItsDeadlineThatStaysBlockedEndsTheBinary) {
  TempDir dir;
  const std::string log = dir.path() + "/subject.log";
  const absl::Time start = absl::Now();
  EXPECT_EQ(RunSubject("BlockedForever", dir, log), 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(40));
  const std::string out = Slurp(log);
  EXPECT_NE(out.find("it was waiting for a sleep of an hour"), std::string::npos) << out;
  EXPECT_NE(out.find("the server is up"), std::string::npos) << out;
  EXPECT_NE(out.find("is still blocked 10s after its processes were killed; exiting"), std::string::npos) << out;
}

}  // namespace
}  // namespace tpserve::e2e
