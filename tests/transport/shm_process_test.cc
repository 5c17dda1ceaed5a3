// ShmHub with readers in other processes (fork): every byte of a seeded
// stream arrives in both, and a reader SIGKILLed mid-stream leaves the hub
// blocked only until someone calls Close.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/seed.h"
#include "tests/transport/payload.h"
#include "transport/shm_channel.h"

namespace tpserve {
namespace {

using transport_test::ChecksumReply;
using transport_test::MessageSizes;
using transport_test::Payload;
using Clock = std::chrono::steady_clock;

// A reader process's exit codes.
constexpr int kChildOk = 0;          // every message matched; the stream ended as expected
constexpr int kChildMismatch = 10;   // a message's bytes were wrong
constexpr int kChildError = 11;      // Open, Receive or Reply failed unexpectedly

// Forks a reader process running `body` (its exit code), killed if this
// process dies first (a reader waits for a hub that vanished without Close
// until someone closes its end). Call with no other thread running here.
pid_t ForkReader(const std::function<int()>& body) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kChildError);  // the parent died before prctl
    _exit(body());
  }
  return pid;
}

int ExitCode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// The exit code of `pid` (128 + signal when killed by one), -1 when it did not
// end within `timeout` (then it is killed).
int WaitExit(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return ExitCode(status);
}

// Reaps the readers on a thread; one that ends before `Finish` closes the hub,
// as the coordinator does when the launcher reports a worker's exit, so a
// crashed reader fails the test at once instead of leaving the hub waiting.
class ReaderMonitor {
 public:
  ReaderMonitor(ShmHub& hub, std::vector<pid_t> pids)
      : pids_(std::move(pids)), codes_(pids_.size(), -1), thread_([this, &hub] { Run(hub); }) {}
  ~ReaderMonitor() { Finish(); }
  // Stops watching (the stream is over; readers may now end).
  void Finish() {
    finished_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Each reader's exit code (waits up to 30 s for each one still running).
  std::vector<int> codes() {
    Finish();
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (codes_[r] == -1) codes_[r] = WaitExit(pids_[r], std::chrono::seconds(30));
    }
    return codes_;
  }

 private:
  void Run(ShmHub& hub) {
    while (!finished_) {
      for (size_t r = 0; r < pids_.size(); ++r) {
        int status = 0;
        if (codes_[r] != -1 || waitpid(pids_[r], &status, WNOHANG) != pids_[r]) continue;
        codes_[r] = ExitCode(status);
        hub.Close(absl::UnavailableError(absl::StrCat("reader ", r, " ended (exit code ", codes_[r],
                                                      ") before the stream did")));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::vector<pid_t> pids_;
  std::vector<int> codes_;  // -1 while running; the monitor thread's until Finish joined it
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

// Reader `reader`: checks messages 0..n-1 against Payload and answers each
// with its checksum; then expects the hub's close.
int CheckingReader(const std::string& name, int reader, uint64_t seed, const std::vector<size_t>& sizes) {
  auto endpoint = ShmEndpoint::Open(name, reader);
  if (!endpoint.ok()) return kChildError;
  for (size_t i = 0; i < sizes.size(); ++i) {
    absl::StatusOr<std::string> m = (*endpoint)->Receive();
    if (!m.ok()) return kChildError;
    if (*m != Payload(seed, i, sizes[i])) return kChildMismatch;
    if (!(*endpoint)->Reply(ChecksumReply(*m)).ok()) return kChildError;
  }
  return (*endpoint)->Receive().status().code() == absl::StatusCode::kUnavailable ? kChildOk : kChildError;
}

// Echoes every message's checksum until the channel closes.
int EchoingReader(const std::string& name, int reader) {
  auto endpoint = ShmEndpoint::Open(name, reader);
  if (!endpoint.ok()) return kChildError;
  while (true) {
    absl::StatusOr<std::string> m = (*endpoint)->Receive();
    if (!m.ok()) return m.status().code() == absl::StatusCode::kUnavailable ? kChildOk : kChildError;
    if (!(*endpoint)->Reply(ChecksumReply(*m)).ok()) return kChildOk;
  }
}

class ShmProcessTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ShmProcessTest, TwoReaderProcessesGetEveryMessage) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  constexpr size_t kRing = 256;
  constexpr int kReaders = 2;
  const std::vector<size_t> sizes = MessageSizes(seed, kRing, 400);
  auto hub = ShmHub::Create(kReaders, kRing, absl::Nanoseconds(GetParam()));
  ASSERT_TRUE(hub.ok()) << hub.status();
  const std::string name = (*hub)->name();
  std::vector<pid_t> children;
  for (int r = 0; r < kReaders; ++r) {
    children.push_back(ForkReader([&, r] { return CheckingReader(name, r, seed, sizes); }));
  }
  ReaderMonitor monitor(**hub, children);
  std::thread publisher([&] {
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (!(*hub)->Publish(Payload(seed, i, sizes[i])).ok()) return;  // the readers' exit codes say why
    }
  });
  bool replies_ok = true;
  for (size_t i = 0; i < sizes.size() && replies_ok; ++i) {
    for (int r = 0; r < kReaders && replies_ok; ++r) {
      absl::StatusOr<std::string> reply = (*hub)->Receive(r);
      EXPECT_TRUE(reply.ok()) << "message " << i << ", reader " << r << ": " << reply.status();
      replies_ok = reply.ok() && *reply == ChecksumReply(Payload(seed, i, sizes[i]));
      EXPECT_TRUE(!reply.ok() || replies_ok) << "wrong checksum for message " << i << " from reader " << r;
    }
  }
  monitor.Finish();  // from here on the readers end: they see the close
  (*hub)->Close(absl::UnavailableError("the test is done"));
  publisher.join();
  const std::vector<int> codes = monitor.codes();
  for (int r = 0; r < kReaders; ++r) {
    EXPECT_EQ(codes[static_cast<size_t>(r)], kChildOk)
        << "reader " << r << " (" << kChildMismatch << ": wrong bytes, " << kChildError
        << ": a call failed, 134: aborted by a check)";
  }
}

INSTANTIATE_TEST_SUITE_P(SpinNs, ShmProcessTest, ::testing::Values(0, 20'000));

TEST(ShmProcessKillTest, AReaderKilledMidStreamHoldsTheHubOnlyUntilClose) {
  constexpr size_t kRing = 1024;
  auto hub = ShmHub::Create(2, kRing);
  ASSERT_TRUE(hub.ok()) << hub.status();
  const std::string name = (*hub)->name();
  const pid_t healthy = ForkReader([&] { return EchoingReader(name, 0); });
  const pid_t doomed = ForkReader([&] { return EchoingReader(name, 1); });

  // Large messages stream through the ring, so the kill lands mid-message.
  std::atomic<bool> publish_returned{false};
  absl::Status publish_end;
  std::thread publisher([&] {
    for (uint64_t i = 0; publish_end.ok(); ++i) publish_end = (*hub)->Publish(Payload(7, i, 10 * kRing + i % 13));
    publish_returned = true;
  });
  std::vector<absl::Status> receive_end(2);
  std::vector<std::thread> receivers;
  for (int r = 0; r < 2; ++r) {
    receivers.emplace_back([&, r] {
      absl::StatusOr<std::string> m;
      do {
        m = (*hub)->Receive(r);
      } while (m.ok());
      receive_end[static_cast<size_t>(r)] = m.status();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(kill(doomed, SIGKILL), 0);
  EXPECT_EQ(WaitExit(doomed, std::chrono::seconds(10)), 128 + SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(publish_returned) << "Publish should wait for the dead reader: " << publish_end;

  const auto closed_at = Clock::now();
  (*hub)->Close(absl::UnavailableError("rank 1 was killed"));
  publisher.join();
  for (std::thread& t : receivers) t.join();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - closed_at).count();
  EXPECT_LT(ms, 2000) << "Close took " << ms << " ms to unblock the hub's calls";
  EXPECT_EQ(publish_end.code(), absl::StatusCode::kUnavailable) << publish_end;
  EXPECT_NE(publish_end.message().find("rank 1 was killed"), std::string::npos) << publish_end;
  for (const absl::Status& s : receive_end) EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(WaitExit(healthy, std::chrono::seconds(10)), kChildOk) << "the live reader should see the close";
}

}  // namespace
}  // namespace tpserve
