// ShmHub / ShmEndpoint in one process, readers on threads: framing, streaming
// through a small ring, reply order, closing from either side, Open's errors
// and the segment's name going away.
#include "transport/shm_channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/seed.h"
#include "tests/transport/payload.h"

namespace tpserve {
namespace {

using transport_test::ChecksumReply;
using transport_test::MessageSizes;
using transport_test::Payload;
using Clock = std::chrono::steady_clock;

// How soon a Close must wake a blocked call (it should take microseconds; the
// bound leaves room for a loaded machine).
constexpr auto kWakeBound = std::chrono::seconds(2);

bool SegmentExists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

std::unique_ptr<ShmHub> MakeHub(int readers, size_t ring, absl::Duration spin = absl::ZeroDuration()) {
  auto hub = ShmHub::Create(readers, ring, spin);
  EXPECT_TRUE(hub.ok()) << hub.status();
  return hub.ok() ? *std::move(hub) : nullptr;
}

std::unique_ptr<ShmEndpoint> MakeEndpoint(const ShmHub& hub, int reader) {
  auto endpoint = ShmEndpoint::Open(hub.name(), reader);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// Runs `call` on a thread; Close (by `close`) after it has been blocked for a
// while must end it with UNAVAILABLE carrying `why` within kWakeBound.
void ExpectCloseWakes(std::function<absl::Status()> call, std::function<void()> close, const std::string& why) {
  std::atomic<bool> returned{false};
  absl::Status result;
  std::thread t([&] {
    result = call();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned) << "the call did not block";
  const auto closed_at = Clock::now();
  close();
  while (!returned && Clock::now() - closed_at < kWakeBound) std::this_thread::sleep_for(std::chrono::microseconds(200));
  const auto waited = std::chrono::duration<double, std::milli>(Clock::now() - closed_at).count();
  EXPECT_TRUE(returned) << "Close did not wake the call within " << kWakeBound.count()
                        << " s; the test now waits for it (ctest's timeout ends it)";
  t.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable) << result;
  EXPECT_NE(result.message().find(why), std::string::npos) << result;
  std::fprintf(stderr, "woken %.3f ms after Close\n", waited);
}

// Joins the threads when the test ends, closing the hub first so that none
// stays blocked after a failed assertion returned early.
class JoinAtExit {
 public:
  explicit JoinAtExit(ShmHub& hub) : hub_(hub) {}
  ~JoinAtExit() {
    hub_.Close(absl::CancelledError("the test ended"));
    for (std::thread& t : threads) t.join();
  }
  std::vector<std::thread> threads;

 private:
  ShmHub& hub_;
};

TEST(ShmChannelTest, OneMessageEachWay) {
  auto hub = MakeHub(1, 4096);
  auto worker = MakeEndpoint(*hub, 0);
  ASSERT_TRUE(hub && worker);
  ASSERT_TRUE(hub->Publish("step 1").ok());
  auto got = worker->Receive();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "step 1");
  ASSERT_TRUE(worker->Reply("done 1").ok());
  auto reply = hub->Receive(0);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "done 1");
  EXPECT_EQ(hub->ring_bytes(), 4096u);
  EXPECT_EQ(worker->num_readers(), 1);
}

// Two readers on threads echo a checksum of each of many messages of edge and
// random sizes (up to ten times the ring) through a 256-byte ring.
class ShmStreamTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ShmStreamTest, EveryReaderGetsEveryMessageInOrder) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  constexpr size_t kRing = 256;
  constexpr int kReaders = 2;
  const std::vector<size_t> sizes = MessageSizes(seed, kRing, 300);
  auto hub = MakeHub(kReaders, kRing, absl::Nanoseconds(GetParam()));
  ASSERT_TRUE(hub);
  std::atomic<int> bad{0};
  JoinAtExit join(*hub);
  for (int r = 0; r < kReaders; ++r) {
    join.threads.emplace_back([&, r] {
      auto endpoint = MakeEndpoint(*hub, r);
      if (!endpoint) return;
      for (size_t i = 0; i < sizes.size(); ++i) {
        auto m = endpoint->Receive();
        if (!m.ok() || *m != Payload(seed, i, sizes[i])) ++bad;
        if (!m.ok() || !endpoint->Reply(ChecksumReply(*m)).ok()) return;
      }
    });
  }
  // Publish on its own thread: replies fill their small rings long before the last message goes out.
  join.threads.emplace_back([&] {
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (absl::Status s = hub->Publish(Payload(seed, i, sizes[i])); !s.ok()) {
        ADD_FAILURE() << "Publish " << i << ": " << s;
        return;
      }
    }
  });
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (int r = 0; r < kReaders; ++r) {
      auto reply = hub->Receive(r);
      ASSERT_TRUE(reply.ok()) << reply.status();
      ASSERT_EQ(*reply, ChecksumReply(Payload(seed, i, sizes[i]))) << "message " << i << ", reader " << r;
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(SpinNs, ShmStreamTest, ::testing::Values(0, 20'000));

TEST(ShmChannelTest, RepliesKeepTheirOrderThroughAFullRing) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  auto hub = MakeHub(2, 128);
  ASSERT_TRUE(hub);
  const std::vector<size_t> sizes = MessageSizes(seed, 128, 100);
  JoinAtExit join(*hub);
  join.threads.emplace_back([&] {
    auto endpoint = MakeEndpoint(*hub, 1);
    for (size_t i = 0; endpoint && i < sizes.size(); ++i) {
      if (!endpoint->Reply(Payload(seed, i, sizes[i])).ok()) return;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the writer fill the ring and wait
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto reply = hub->Receive(1);
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(*reply, Payload(seed, i, sizes[i])) << "reply " << i;
  }
}

TEST(ShmChannelTest, CloseWakesBlockedCallsOnTheHub) {
  auto hub = MakeHub(1, 64);
  auto worker = MakeEndpoint(*hub, 0);
  ASSERT_TRUE(hub && worker);
  ExpectCloseWakes([&] { return hub->Receive(0).status(); },
                   [&] { hub->Close(absl::UnavailableError("rank 0 lost")); }, "rank 0 lost");
  EXPECT_EQ(hub->Publish("late").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(hub->Receive(0).status().code(), absl::StatusCode::kUnavailable);
  hub->Close(absl::UnavailableError("again"));  // idempotent: the first why stays
  EXPECT_NE(hub->Publish("x").message().find("rank 0 lost"), std::string::npos);
}

TEST(ShmChannelTest, CloseWakesAPublishBlockedOnAFullRing) {
  auto hub = MakeHub(1, 64);
  auto worker = MakeEndpoint(*hub, 0);  // never reads
  ASSERT_TRUE(hub && worker);
  ExpectCloseWakes([&] { return hub->Publish(std::string(1000, 'x')); },
                   [&] { hub->Close(absl::UnavailableError("worker stuck")); }, "worker stuck");
}

TEST(ShmChannelTest, CloseWakesBlockedCallsOnTheEndpoint) {
  auto hub = MakeHub(1, 64);
  auto worker = MakeEndpoint(*hub, 0);
  ASSERT_TRUE(hub && worker);
  ExpectCloseWakes([&] { return worker->Receive().status(); },
                   [&] { worker->Close(absl::UnavailableError("session broke")); }, "session broke");
  EXPECT_EQ(worker->Reply("x").code(), absl::StatusCode::kUnavailable);
  // The hub hears of it: Publish fails naming the reader and its why.
  absl::Status published = hub->Publish("x");
  EXPECT_EQ(published.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(published.message().find("reader 0"), std::string::npos) << published;
  EXPECT_NE(published.message().find("session broke"), std::string::npos) << published;
}

TEST(ShmChannelTest, CloseWakesAReplyBlockedOnAFullRing) {
  auto hub = MakeHub(1, 64);
  auto worker = MakeEndpoint(*hub, 0);
  ASSERT_TRUE(hub && worker);
  ExpectCloseWakes([&] { return worker->Reply(std::string(1000, 'y')); },
                   [&] { worker->Close(absl::UnavailableError("stopping")); }, "stopping");
}

TEST(ShmChannelTest, HubCloseWakesTheReaderAfterTheMessagesItSent) {
  auto hub = MakeHub(1, 4096);
  auto worker = MakeEndpoint(*hub, 0);
  ASSERT_TRUE(hub && worker);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(hub->Publish(absl::StrCat("m", i)).ok());
  hub->Close(absl::UnavailableError("draining"));
  for (int i = 0; i < 3; ++i) {
    auto m = worker->Receive();
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, absl::StrCat("m", i));
  }
  EXPECT_EQ(worker->Receive().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(worker->Reply("x").code(), absl::StatusCode::kUnavailable);
}

TEST(ShmChannelTest, HubCloseWakesABlockedReader) {
  auto hub = MakeHub(1, 4096);
  auto worker = MakeEndpoint(*hub, 0);
  ASSERT_TRUE(hub && worker);
  ExpectCloseWakes([&] { return worker->Receive().status(); },
                   [&] { hub->Close(absl::UnavailableError("coordinator stopping")); }, "coordinator stopping");
}

TEST(ShmChannelTest, ReaderCloseEndsTheHubsReceiveAfterItsReplies) {
  auto hub = MakeHub(1, 4096);
  auto worker = MakeEndpoint(*hub, 0);
  ASSERT_TRUE(hub && worker);
  ASSERT_TRUE(worker->Reply("last words").ok());
  worker.reset();  // destroying closes
  auto reply = hub->Receive(0);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "last words");
  absl::StatusOr<std::string> next = hub->Receive(0);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(next.status().message().find("reader 0"), std::string::npos) << next.status();
}

TEST(ShmChannelTest, OpenSaysWhatIsWrong) {
  auto missing = ShmEndpoint::Open("/tpserve-no-such-channel", 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/tpserve-no-such-channel"), std::string::npos) << missing.status();
  EXPECT_EQ(ShmEndpoint::Open("no-slash", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmEndpoint::Open("/a/b", 0).status().code(), absl::StatusCode::kInvalidArgument);

  auto hub = MakeHub(2, 4096);
  ASSERT_TRUE(hub);
  EXPECT_EQ(ShmEndpoint::Open(hub->name(), 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmEndpoint::Open(hub->name(), -1).status().code(), absl::StatusCode::kInvalidArgument);
  auto first = MakeEndpoint(*hub, 0);
  EXPECT_EQ(ShmEndpoint::Open(hub->name(), 0).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(ShmChannelTest, OpenRefusesASegmentThatIsNotAChannel) {
  const std::string name = absl::StrCat("/tpserve-test-foreign-", getpid());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  const std::string junk(8192, 'j');
  ASSERT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  close(fd);
  auto endpoint = ShmEndpoint::Open(name, 0);
  shm_unlink(name.c_str());
  EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(endpoint.status().message().find("not a tpserve channel"), std::string::npos) << endpoint.status();
}

TEST(ShmChannelTest, CreateRefusesBadSizes) {
  EXPECT_EQ(ShmHub::Create(0, 4096).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmHub::Create(2, 1000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmHub::Create(2, 32).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShmChannelTest, TheNameGoesAwayWithTheHub) {
  auto hub = MakeHub(2, 4096);
  ASSERT_TRUE(hub);
  const std::string name = hub->name();
  EXPECT_EQ(name.rfind("/tpserve-", 0), 0u) << name;
  EXPECT_TRUE(SegmentExists(name));
  hub.reset();
  EXPECT_FALSE(SegmentExists(name));
  EXPECT_EQ(ShmEndpoint::Open(name, 0).status().code(), absl::StatusCode::kNotFound);
}

TEST(ShmChannelTest, TheNameGoesAwayOnceEveryReaderOpenedIt) {
  auto hub = MakeHub(2, 4096);
  ASSERT_TRUE(hub);
  auto a = MakeEndpoint(*hub, 0);
  EXPECT_TRUE(SegmentExists(hub->name()));
  auto b = MakeEndpoint(*hub, 1);
  EXPECT_FALSE(SegmentExists(hub->name()));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(hub->Publish("still works").ok());
  EXPECT_EQ(*b->Receive(), "still works");
}

TEST(ShmChannelTest, NamesAreUnguessable) {
  auto a = MakeHub(1, 64);
  auto b = MakeHub(1, 64);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->name(), b->name());
  EXPECT_EQ(a->name().size(), std::string("/tpserve-").size() + 32) << a->name();
}

}  // namespace
}  // namespace tpserve
