// ResponseQueue: order, the end after the responses, the bound (Push false +
// RESOURCE_EXHAUSTED), pushes after the end, the event-driven wake-up
// (on_ready exactly once per park, never under the lock), Cancel, and a
// producer and an event-driven consumer on two threads.
#include "coordinator/response_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;
using Next = ResponseQueue::Next;

v1::GenerateResponse Chunk(uint32_t token) {
  v1::GenerateResponse r;
  r.mutable_chunk()->add_token_ids(token);
  return r;
}

// Takes everything there is without waiting: the tokens, and the end status
// when the end was reached (else nullopt).
struct Drained {
  std::vector<uint32_t> tokens;
  std::optional<absl::Status> end;
};
Drained DrainNow(ResponseQueue& q) {
  Drained d;
  v1::GenerateResponse r;
  absl::Status end;
  while (true) {
    switch (q.TryPop(&r, &end)) {
      case Next::kMessage:
        d.tokens.push_back(r.chunk().token_ids(0));
        break;
      case Next::kEnd:
        d.end = end;
        return d;
      case Next::kTimeout:
        return d;
    }
  }
}

TEST(ResponseQueueTest, ResponsesComeInOrderThenTheEnd) {
  ResponseQueue q;
  for (uint32_t t : {7u, 3u, 11u, 1u, 19u}) EXPECT_TRUE(q.Push(Chunk(t)));
  q.End(absl::InternalError("step failed"));
  q.End(absl::OkStatus());  // only the first End counts
  const Drained d = DrainNow(q);
  EXPECT_EQ(d.tokens, (std::vector<uint32_t>{7, 3, 11, 1, 19}));
  ASSERT_TRUE(d.end.has_value());
  EXPECT_EQ(d.end->code(), absl::StatusCode::kInternal);
  EXPECT_EQ(d.end->message(), "step failed");
  // The end stays.
  v1::GenerateResponse r;
  absl::Status end;
  EXPECT_EQ(q.Pop(absl::ZeroDuration(), &r, &end), Next::kEnd);
}

TEST(ResponseQueueTest, BlockingPopWaitsThenTimesOut) {
  ResponseQueue q;
  v1::GenerateResponse r;
  absl::Status end;
  EXPECT_EQ(q.Pop(absl::Milliseconds(5), &r, &end), Next::kTimeout);
  std::thread producer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    q.Push(Chunk(5));
  });
  EXPECT_EQ(q.Pop(absl::Seconds(30), &r, &end), Next::kMessage);
  EXPECT_EQ(r.chunk().token_ids(0), 5u);
  producer.join();
}

TEST(ResponseQueueTest, OneMoreThanTheBoundEndsWithResourceExhaustedAndDropsEverything) {
  ResponseQueue q(/*max_buffered=*/3);
  for (uint32_t t = 0; t < 3; ++t) EXPECT_TRUE(q.Push(Chunk(t))) << t;
  EXPECT_FALSE(q.Push(Chunk(3)));
  EXPECT_FALSE(q.Push(Chunk(4)));  // stays ended
  q.End(absl::OkStatus());         // ignored: the overflow was the end
  const Drained d = DrainNow(q);
  EXPECT_TRUE(d.tokens.empty()) << "the buffered responses were not dropped";
  ASSERT_TRUE(d.end.has_value());
  EXPECT_EQ(d.end->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(d.end->message().find("stopped reading"), std::string::npos) << d.end->message();
  EXPECT_NE(d.end->message().find("more than 3 "), std::string::npos) << d.end->message();
  EXPECT_NE(d.end->message().find("--max-buffered-chunks"), std::string::npos) << d.end->message();
}

TEST(ResponseQueueTest, TakingMakesRoomUnderTheBound) {
  ResponseQueue q(/*max_buffered=*/2);
  v1::GenerateResponse r;
  absl::Status end;
  for (uint32_t t = 0; t < 100; ++t) {
    ASSERT_TRUE(q.Push(Chunk(2 * t)));
    ASSERT_TRUE(q.Push(Chunk(2 * t + 1)));
    ASSERT_EQ(q.TryPop(&r, &end), Next::kMessage);
    ASSERT_EQ(q.TryPop(&r, &end), Next::kMessage);
    ASSERT_EQ(r.chunk().token_ids(0), 2 * t + 1);
  }
}

// A consumer that fell behind takes the chunks waiting in a row as one: token
// ids, text and log-probs in order; a Complete is never merged into them.
TEST(ResponseQueueTest, MergingTakesTheChunksWaitingInARowAsOne) {
  ResponseQueue q;
  for (uint32_t t : {4u, 5u, 6u}) {
    v1::GenerateResponse r = Chunk(t);
    r.set_request_id("r");
    r.mutable_chunk()->set_text(std::string(1, static_cast<char>('a' + t)));
    r.mutable_chunk()->add_logprobs()->set_token_id(t);
    ASSERT_TRUE(q.Push(std::move(r)));
  }
  v1::GenerateResponse complete;
  complete.mutable_complete()->set_finish_reason(v1::LENGTH);
  ASSERT_TRUE(q.Push(complete));
  ASSERT_TRUE(q.Push(Chunk(9)));  // cannot happen after Complete; shows no merge across it
  v1::GenerateResponse r;
  absl::Status end;
  ASSERT_EQ(q.TryPop(&r, &end, /*merge_chunks=*/true), Next::kMessage);
  EXPECT_EQ(r.request_id(), "r");
  EXPECT_EQ(std::vector<uint32_t>(r.chunk().token_ids().begin(), r.chunk().token_ids().end()),
            (std::vector<uint32_t>{4, 5, 6}));
  EXPECT_EQ(r.chunk().text(), "efg");
  ASSERT_EQ(r.chunk().logprobs_size(), 3);
  EXPECT_EQ(r.chunk().logprobs(2).token_id(), 6u);
  ASSERT_EQ(q.TryPop(&r, &end, /*merge_chunks=*/true), Next::kMessage);
  EXPECT_TRUE(r.has_complete());
  ASSERT_EQ(q.TryPop(&r, &end, /*merge_chunks=*/true), Next::kMessage);
  EXPECT_EQ(r.chunk().token_ids_size(), 1);
}

// The chunk parts of one token, as an output thread appends them.
void AppendToken(v1::GenerateResponse& r, uint32_t token) {
  if (r.request_id() != "r") r.set_request_id("r");
  v1::Chunk* c = r.mutable_chunk();
  c->add_token_ids(token);
  c->mutable_text()->append(std::string(1, static_cast<char>('a' + token)));
  c->mutable_reasoning_text()->append(std::string(1, static_cast<char>('A' + token)));
  c->add_logprobs()->set_token_id(token);
  if (token % 2 == 0) c->add_tool_calls()->set_name(std::string(1, static_cast<char>('0' + token)));
}

// PushChunk merges as it goes: a consumer that takes late gets one message
// with every part of every chunk in order, and each push counts against the bound.
TEST(ResponseQueueTest, PushChunkMergesEveryPartInOrderUntilTaken) {
  ResponseQueue q(/*max_buffered=*/4);
  for (uint32_t t : {4u, 5u, 6u}) ASSERT_TRUE(q.PushChunk([t](v1::GenerateResponse& r) { AppendToken(r, t); }));
  v1::GenerateResponse r;
  absl::Status end;
  ASSERT_EQ(q.TryPop(&r, &end, /*merge_chunks=*/true), Next::kMessage);
  EXPECT_EQ(r.request_id(), "r");
  EXPECT_EQ(std::vector<uint32_t>(r.chunk().token_ids().begin(), r.chunk().token_ids().end()),
            (std::vector<uint32_t>{4, 5, 6}));
  EXPECT_EQ(r.chunk().text(), "efg");
  EXPECT_EQ(r.chunk().reasoning_text(), "EFG");
  ASSERT_EQ(r.chunk().logprobs_size(), 3);
  EXPECT_EQ(r.chunk().logprobs(2).token_id(), 6u);
  ASSERT_EQ(r.chunk().tool_calls_size(), 2);
  EXPECT_EQ(r.chunk().tool_calls(1).name(), "6");
  EXPECT_EQ(q.TryPop(&r, &end), Next::kTimeout);
  // Taken: room again for max_buffered pushes, merged anew (nothing of the
  // last take is left in the reused message).
  for (uint32_t t = 0; t < 4; ++t) ASSERT_TRUE(q.PushChunk([t](v1::GenerateResponse& x) { AppendToken(x, t); }));
  EXPECT_FALSE(q.PushChunk([](v1::GenerateResponse& x) { AppendToken(x, 9); })) << "the fifth push overflows";
  ASSERT_EQ(q.TryPop(&r, &end), Next::kEnd);
  EXPECT_EQ(end.code(), absl::StatusCode::kResourceExhausted);
}

TEST(ResponseQueueTest, PushChunkKeepsItsPlaceAmongPushes) {
  ResponseQueue q;
  ASSERT_TRUE(q.PushChunk([](v1::GenerateResponse& r) { AppendToken(r, 1); }));
  ASSERT_TRUE(q.PushChunk([](v1::GenerateResponse& r) { AppendToken(r, 2); }));
  v1::GenerateResponse complete;
  complete.mutable_complete()->set_finish_reason(v1::LENGTH);
  ASSERT_TRUE(q.Push(complete));
  // Behind a Push: its own message, after it (cannot happen after a Complete;
  // shows the order holds).
  ASSERT_TRUE(q.PushChunk([](v1::GenerateResponse& r) { AppendToken(r, 3); }));
  q.End(absl::OkStatus());
  v1::GenerateResponse r;
  absl::Status end;
  ASSERT_EQ(q.TryPop(&r, &end), Next::kMessage);
  EXPECT_EQ(r.chunk().token_ids_size(), 2);
  ASSERT_EQ(q.TryPop(&r, &end), Next::kMessage);
  EXPECT_TRUE(r.has_complete());
  ASSERT_EQ(q.TryPop(&r, &end), Next::kMessage);
  ASSERT_EQ(r.chunk().token_ids_size(), 1);
  EXPECT_EQ(r.chunk().token_ids(0), 3u);
  EXPECT_EQ(r.chunk().text(), "d");
  ASSERT_EQ(q.TryPop(&r, &end), Next::kEnd);
  EXPECT_TRUE(end.ok());
}

// The chunks Push queued separately merge with all their parts too.
TEST(ResponseQueueTest, MergingKeepsReasoningAndToolCalls) {
  ResponseQueue q;
  for (uint32_t t : {2u, 3u, 4u}) {
    v1::GenerateResponse r;
    AppendToken(r, t);
    ASSERT_TRUE(q.Push(std::move(r)));
  }
  v1::GenerateResponse r;
  absl::Status end;
  ASSERT_EQ(q.TryPop(&r, &end, /*merge_chunks=*/true), Next::kMessage);
  EXPECT_EQ(r.chunk().reasoning_text(), "CDE");
  ASSERT_EQ(r.chunk().tool_calls_size(), 2);
  EXPECT_EQ(r.chunk().tool_calls(0).name(), "2");
  EXPECT_EQ(r.chunk().tool_calls(1).name(), "4");
}

TEST(ResponseQueueTest, APushAfterTheEndIsDropped) {
  ResponseQueue q;
  EXPECT_TRUE(q.Push(Chunk(1)));
  q.End(absl::OkStatus());
  EXPECT_FALSE(q.Push(Chunk(2)));
  const Drained d = DrainNow(q);
  EXPECT_EQ(d.tokens, std::vector<uint32_t>{1});
  ASSERT_TRUE(d.end.has_value());
  EXPECT_TRUE(d.end->ok());
}

TEST(ResponseQueueTest, OnReadyComesOncePerParkAndOnlyAfterAPark) {
  int calls = 0;
  ResponseQueue q(ResponseQueue::kDefaultMaxBuffered, [&] { ++calls; });
  EXPECT_TRUE(q.Push(Chunk(1)));
  EXPECT_EQ(calls, 0) << "nobody was parked";
  EXPECT_EQ(DrainNow(q).tokens, std::vector<uint32_t>{1});  // ends with a park
  EXPECT_TRUE(q.Push(Chunk(2)));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(q.Push(Chunk(3)));
  EXPECT_EQ(calls, 1) << "woken again without parking again";
  EXPECT_EQ(DrainNow(q).tokens, (std::vector<uint32_t>{2, 3}));
  q.End(absl::OkStatus());  // the end wakes a parked consumer too
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(DrainNow(q).end.has_value());
}

TEST(ResponseQueueTest, OnReadyRunsWithoutTheLockHeld) {
  std::unique_ptr<ResponseQueue> q;
  std::vector<uint32_t> got;
  // The consumer takes from inside on_ready, as the reactor does: with the
  // lock held this would deadlock (absl::Mutex is not reentrant).
  q = std::make_unique<ResponseQueue>(ResponseQueue::kDefaultMaxBuffered, [&] {
    for (uint32_t t : DrainNow(*q).tokens) got.push_back(t);
  });
  DrainNow(*q);
  for (uint32_t t = 0; t < 5; ++t) EXPECT_TRUE(q->Push(Chunk(t)));
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1, 2, 3, 4}));
}

TEST(ResponseQueueTest, CancelHandsBackAParkedTurnAndEndsWithItsReason) {
  int calls = 0;
  ResponseQueue q(ResponseQueue::kDefaultMaxBuffered, [&] { ++calls; });
  DrainNow(q);  // parked
  const ResponseQueue::CancelResult c = q.Cancel(absl::CancelledError("the client cancelled"));
  EXPECT_TRUE(c.producer_open);
  EXPECT_TRUE(c.consumer_waiting);
  EXPECT_FALSE(q.Push(Chunk(1)));  // the producer learns the stream is gone
  q.End(absl::OkStatus());         // ignored
  EXPECT_EQ(calls, 0) << "the parked turn went back to the canceller, not to on_ready";
  const Drained d = DrainNow(q);
  EXPECT_TRUE(d.tokens.empty());
  ASSERT_TRUE(d.end.has_value());
  EXPECT_EQ(d.end->code(), absl::StatusCode::kCancelled);
  const ResponseQueue::CancelResult again = q.Cancel(absl::DeadlineExceededError("late"));
  EXPECT_FALSE(again.producer_open);
  EXPECT_FALSE(again.consumer_waiting);
}

TEST(ResponseQueueTest, CancelAfterTheEndDropsWhatWasUnsentAndDoesNotReopen) {
  ResponseQueue q;
  EXPECT_TRUE(q.Push(Chunk(1)));
  q.End(absl::OkStatus());
  const ResponseQueue::CancelResult c = q.Cancel(absl::CancelledError("the client went away"));
  EXPECT_FALSE(c.producer_open) << "the engine ended it already: nothing to abort";
  EXPECT_FALSE(c.consumer_waiting);
  const Drained d = DrainNow(q);
  EXPECT_TRUE(d.tokens.empty());
  ASSERT_TRUE(d.end.has_value());
  EXPECT_EQ(d.end->code(), absl::StatusCode::kCancelled);
}

// A producer thread against an event-driven consumer that, like the reactor,
// takes only while it holds the turn (parked turns come back through
// on_ready, here handed to the consumer's thread). Every response arrives
// once, in order, then the end, and every park gets exactly one on_ready.
// With `stall_after` >= 0 the consumer stops taking after that many responses
// until the producer has seen Push fail (it may fail earlier when the
// consumer lags): the failure must come exactly when the bound is exceeded,
// and the consumer then gets RESOURCE_EXHAUSTED and nothing more.
void ProduceAndConsume(int n, int64_t bound, int stall_after, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " n " << n << " bound " << bound);
  absl::Mutex mu;
  int turns = 0;  // on_ready calls not yet taken by the consumer thread
  std::atomic<int> wakes{0};
  std::atomic<bool> overflowed{false};
  auto q = std::make_unique<ResponseQueue>(bound, [&] {
    wakes.fetch_add(1);
    absl::MutexLock lock(&mu);
    ++turns;
  });
  int parks = 0;
  std::vector<uint32_t> got;
  std::optional<absl::Status> end;
  std::thread consumer([&] {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    v1::GenerateResponse r;
    absl::Status status;
    while (!end) {
      if (static_cast<int>(got.size()) == stall_after) {
        const absl::Time give_up = absl::Now() + absl::Seconds(60);
        while (!overflowed.load() && absl::Now() < give_up) absl::SleepFor(absl::Microseconds(100));
      }
      switch (q->TryPop(&r, &status)) {
        case Next::kMessage:
          got.push_back(r.chunk().token_ids(0));
          if (rng() % 64 == 0) absl::SleepFor(absl::Microseconds(rng() % 200));  // a slow write
          break;
        case Next::kEnd:
          end = status;
          break;
        case Next::kTimeout: {
          ++parks;
          absl::MutexLock lock(&mu);
          mu.Await(absl::Condition(+[](int* t) { return *t > 0; }, &turns));
          --turns;
          break;
        }
      }
    }
  });
  int first_false = -1;
  std::mt19937 rng(static_cast<uint32_t>(seed) ^ 0x9e3779b9u);
  for (int i = 0; i < n; ++i) {
    const bool pushed = q->Push(Chunk(static_cast<uint32_t>(i)));
    if (!pushed && first_false < 0) {
      first_false = i;
      overflowed.store(true);
    }
    if (pushed && first_false >= 0) ADD_FAILURE() << "push " << i << " taken after the overflow";
    if (rng() % 97 == 0) absl::SleepFor(absl::Microseconds(rng() % 100));
  }
  q->End(absl::OkStatus());
  consumer.join();
  ASSERT_TRUE(end.has_value());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i) << "out of order or duplicated";
  EXPECT_EQ(wakes.load(), parks) << "each park must get exactly one on_ready";
  if (stall_after < 0) {
    EXPECT_EQ(first_false, -1);
    EXPECT_TRUE(end->ok()) << end->message();
    EXPECT_EQ(got.size(), static_cast<size_t>(n));
  } else {
    // When Push failed, everything before it had been taken (`got`, none after)
    // or was waiting (exactly `bound`).
    EXPECT_EQ(static_cast<int64_t>(got.size()) + bound, first_false)
        << "Push failed before or after the bound, or responses came after the overflow";
    EXPECT_LE(got.size(), static_cast<size_t>(stall_after));
    EXPECT_EQ(end->code(), absl::StatusCode::kResourceExhausted) << end->message();
  }
}

TEST(ResponseQueueTest, ConcurrentProducerAndEventDrivenConsumerKeepOrder) {
  ProduceAndConsume(/*n=*/20011, /*bound=*/20011, /*stall_after=*/-1, testing_util::TestSeed());
}

TEST(ResponseQueueTest, ConcurrentConsumerThatStopsTakingOverflowsAtTheBound) {
  ProduceAndConsume(/*n=*/5003, /*bound=*/7, /*stall_after=*/733, testing_util::TestSeed());
}

// n > 1: chunks merge only with chunks of their own choice, in order.
TEST(ResponseQueueTest, ChunksOfDifferentChoicesStayApartInOrder) {
  ResponseQueue q;
  ASSERT_TRUE(q.PushChunk(0, [](v1::GenerateResponse& r) { AppendToken(r, 1); }));
  ASSERT_TRUE(q.PushChunk(0, [](v1::GenerateResponse& r) { AppendToken(r, 2); }));
  ASSERT_TRUE(q.PushChunk(1, [](v1::GenerateResponse& r) { AppendToken(r, 7); }));
  ASSERT_TRUE(q.PushChunk(1, [](v1::GenerateResponse& r) { AppendToken(r, 8); }));
  ASSERT_TRUE(q.PushChunk(0, [](v1::GenerateResponse& r) { AppendToken(r, 3); }));
  v1::GenerateResponse r;
  absl::Status end;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> got;
  while (q.TryPop(&r, &end, /*merge_chunks=*/true) == ResponseQueue::Next::kMessage) {
    got.emplace_back(r.index(), std::vector<uint32_t>(r.chunk().token_ids().begin(), r.chunk().token_ids().end()));
  }
  using Got = std::vector<std::pair<uint32_t, std::vector<uint32_t>>>;
  EXPECT_EQ(got, (Got{{0, {1, 2}}, {1, {7, 8}}, {0, {3}}}));
}

}  // namespace
}  // namespace tpserve
