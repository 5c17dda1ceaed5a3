// The engine loop against fake workers (testing_util::FakeStepWorker) that keep
// per-sequence state from the step diffs exactly as a worker must, and "samples" a token that is a
// pure function of everything the sequence computed so far. The outputs are
// then independent of batching, chunking, prefix caching and preemption, and
// any inconsistency between what the coordinator sends and what it believes
// the workers hold shows up as a wrong token.
#include "coordinator/engine_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/engine_groups.h"
#include "tests/testing/fake_worker.h"
#include "tests/testing/seed.h"
#include "tests/tokenizer/toy_tokenizer.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;
namespace iv1 = tpserve::internal::v1;

using testing_util::FakeContinuation;

// The workers behind a StepTransport: a FakeStepWorker that runs each step
// as it is sent (in order, as real workers do), plus a failure to inject, a
// delay per step, a step count, the most steps ever sent and not yet
// received, and how many tokens were sampled for each sequence.
class FakeWorkers {
 public:
  StepTransport Transport() {
    return StepTransport{.send = [this](iv1::Step step) { return Send(std::move(step)); },
                         .receive = [this](uint64_t ticket) { return Receive(ticket); }};
  }
  absl::StatusOr<uint64_t> Send(const iv1::Step& step) {
    absl::MutexLock lock(&mu_);
    ++steps_;
    const uint64_t ticket = next_ticket_++;
    if (!fail_next_.ok()) {
      results_[ticket] = fail_next_;
      fail_next_ = absl::OkStatus();
    } else {
      results_[ticket] = testing_util::RunFakeStep(model_, step);
      if (results_[ticket].ok()) {
        for (iv1::SampledToken& t : *results_[ticket]->mutable_tokens()) {
          ++sampled_[t.seq_id()];
          const testing_util::FakeStepWorker::Sequence* seq = model_.Find(t.seq_id());
          if (seq != nullptr && !seq->tokens.empty() && seq->tokens[0] == give_up_on_) t.set_error(kGaveUp);
        }
      }
    }
    max_outstanding_ = std::max(max_outstanding_, static_cast<int>(results_.size()));
    return ticket;
  }
  absl::StatusOr<iv1::StepResult> Receive(uint64_t ticket) {
    if (delay_ > absl::ZeroDuration()) absl::SleepFor(delay_);
    absl::MutexLock lock(&mu_);
    absl::StatusOr<iv1::StepResult> result = std::move(results_.at(ticket));
    results_.erase(ticket);
    return result;
  }

  // What rank 0 says when it gave up on a sequence's grammar (SampledToken.error).
  static constexpr char kGaveUp[] = "the grammar is too ambiguous to constrain this output";

  absl::Mutex mu_;
  testing_util::FakeStepWorker model_;
  int32_t give_up_on_ = -1;  // the tokens of a sequence whose prompt starts with this carry kGaveUp
  absl::Status fail_next_;
  absl::Duration delay_;
  int steps_ = 0;
  int max_outstanding_ = 0;
  absl::flat_hash_map<uint64_t, int> sampled_;  // by seq id
  uint64_t next_ticket_ = 1;
  absl::flat_hash_map<uint64_t, absl::StatusOr<iv1::StepResult>> results_;  // by ticket
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  absl::Status end;
  bool completed = false;
  v1::Complete complete;
};

Outcome Drain(ResponseQueue& q) {
  Outcome o;
  v1::GenerateResponse r;
  while (true) {
    switch (q.Pop(absl::Seconds(30), &r, &o.end)) {
      case ResponseQueue::Next::kMessage:
        if (r.has_chunk()) {
          for (uint32_t t : r.chunk().token_ids()) o.tokens.push_back(static_cast<int32_t>(t));
          o.text += r.chunk().text();
        } else {
          o.completed = true;
          o.complete = r.complete();
        }
        break;
      case ResponseQueue::Next::kEnd:
        return o;
      case ResponseQueue::Next::kTimeout:
        o.end = absl::DeadlineExceededError("test: no end within 30 s");
        return o;
    }
  }
}

// A stream of n choices, by GenerateResponse.index.
std::map<uint32_t, Outcome> DrainChoices(ResponseQueue& q, absl::Status* end) {
  std::map<uint32_t, Outcome> by_index;
  v1::GenerateResponse r;
  while (true) {
    switch (q.Pop(absl::Seconds(30), &r, end)) {
      case ResponseQueue::Next::kMessage: {
        Outcome& o = by_index[r.index()];
        EXPECT_FALSE(o.completed) << "choice " << r.index() << " got a response after its Complete";
        if (r.has_chunk()) {
          for (uint32_t t : r.chunk().token_ids()) o.tokens.push_back(static_cast<int32_t>(t));
          o.text += r.chunk().text();
        } else {
          o.completed = true;
          o.complete = r.complete();
        }
        break;
      }
      case ResponseQueue::Next::kEnd:
        return by_index;
      case ResponseQueue::Next::kTimeout:
        *end = absl::DeadlineExceededError("test: no end within 30 s");
        return by_index;
    }
  }
}

// Every test runs with the step pipeline (overlap) and in lock-step: the
// outputs must not change.
class EngineLoopTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromJsonText(testing::ToyTokenizerJson().dump(), "toy");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
  }
  void Start(int64_t num_blocks, int32_t block_size = 4, int64_t budget = 32, int32_t max_seqs = 64,
             int32_t max_queue = 1000) {
    EngineLoopOptions o;
    o.scheduler = {.max_num_batched_tokens = budget, .max_num_seqs = max_seqs, .max_queue = max_queue};
    o.num_blocks = num_blocks;
    o.block_size = block_size;
    o.max_model_len = 4096;
    o.eos_token_ids = {testing::kEnd};
    o.overlap = GetParam();
    o.metrics = &metrics_;
    engine_ = std::make_unique<EngineLoop>(*tokenizer_, o, workers_.Transport());
    engine_->Start();
  }
  static PreparedRequest Request(std::vector<int32_t> prompt, int64_t max_tokens) {
    PreparedRequest r;
    r.prompt = std::move(prompt);
    r.stop.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  std::shared_ptr<ResponseQueue> Submit(const std::string& id, PreparedRequest r) {
    auto q = std::make_shared<ResponseQueue>();
    absl::Status s = engine_->Submit("client", id, std::move(r), q);
    EXPECT_TRUE(s.ok()) << s;
    return q;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  FakeWorkers workers_;
  CoordinatorMetrics metrics_{/*max_model_len=*/4096, /*tp=*/1};
  std::unique_ptr<EngineLoop> engine_;  // after metrics_: stopped before they go
};

TEST_P(EngineLoopTest, ConcurrentRequestsUnderATinyKvPoolGetTheirOwnOutputs) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  Start(/*num_blocks=*/19, /*block_size=*/4, /*budget=*/13);
  struct Case {
    std::vector<int32_t> prompt;
    int n;
    std::shared_ptr<ResponseQueue> q;
  };
  std::vector<Case> cases(37);
  for (size_t i = 0; i < cases.size(); ++i) {
    cases[i].prompt.resize(1 + rng() % 23);
    for (auto& t : cases[i].prompt) t = 'a' + static_cast<int32_t>(rng() % 3);  // shared prefixes
    cases[i].n = 1 + static_cast<int>(rng() % 17);
    cases[i].q = Submit(absl::StrCat("r", i), Request(cases[i].prompt, cases[i].n));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    Outcome o = Drain(*cases[i].q);
    ASSERT_TRUE(o.end.ok()) << "request " << i << ": " << o.end;
    ASSERT_TRUE(o.completed);
    EXPECT_EQ(o.tokens, FakeContinuation(cases[i].prompt, cases[i].n)) << "request " << i;
    EXPECT_EQ(o.text, std::string(o.tokens.begin(), o.tokens.end()));
    EXPECT_EQ(o.complete.finish_reason(), v1::LENGTH);
    EXPECT_EQ(o.complete.usage().prompt_tokens(), cases[i].prompt.size());
    EXPECT_EQ(o.complete.usage().completion_tokens(), static_cast<uint32_t>(cases[i].n));
    EXPECT_GE(o.complete.timing().total_seconds(), o.complete.timing().time_to_first_token_seconds());
  }
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  const EngineStats s = engine_->stats();
  EXPECT_EQ(s.free_blocks, s.num_blocks);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
}

TEST_P(EngineLoopTest, SamePromptTwiceIsServedFromThePrefixCache) {
  Start(64);
  const std::vector<int32_t> prompt = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k'};
  Outcome first = Drain(*Submit("a", Request(prompt, 5)));
  Outcome second = Drain(*Submit("b", Request(prompt, 5)));
  ASSERT_TRUE(first.end.ok() && second.end.ok());
  EXPECT_EQ(first.complete.usage().cached_tokens(), 0u);
  EXPECT_EQ(second.complete.usage().cached_tokens(), 8u);  // two full blocks of 4
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_GT(engine_->stats().prefix_cache_hit_rate, 0.0);
}

TEST_P(EngineLoopTest, EosEndsTheRequestWithoutItsText) {
  workers_.model_.set_eos_after(6, testing::kEnd);
  Start(64);
  PreparedRequest r = Request({'x', 'y', 'z'}, 100);
  r.sampling.logprobs = 1;
  Outcome o = Drain(*Submit("a", std::move(r)));
  ASSERT_TRUE(o.end.ok()) << o.end;
  EXPECT_EQ(o.complete.finish_reason(), v1::EOS);
  ASSERT_EQ(o.tokens.size(), 4u);
  EXPECT_EQ(o.tokens.back(), testing::kEnd);
  EXPECT_EQ(o.text.size(), 3u);
}

TEST_P(EngineLoopTest, AbortEndsWithAbortedAndFreesTheBlocks) {
  workers_.delay_ = absl::Milliseconds(5);
  Start(64);
  auto q = Submit("long", Request({'a', 'b', 'c', 'd', 'e'}, 3000));
  v1::GenerateResponse r;
  absl::Status end;
  ASSERT_EQ(q->Pop(absl::Seconds(10), &r, &end), ResponseQueue::Next::kMessage);  // it runs
  EXPECT_GT(engine_->stats().num_blocks - engine_->stats().free_blocks, 0);
  EXPECT_TRUE(engine_->Abort("client", "long", absl::OkStatus()));
  EXPECT_FALSE(engine_->Abort("client", "nope", absl::OkStatus()));
  Outcome o = Drain(*q);
  ASSERT_TRUE(o.end.ok()) << o.end;
  ASSERT_TRUE(o.completed);
  EXPECT_EQ(o.complete.finish_reason(), v1::ABORTED);
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(engine_->stats().free_blocks, 64);
  // The workers were told to drop it: a step that carries only the drop goes
  // out by itself.
  for (int i = 0; i < 500; ++i) {
    {
      absl::MutexLock lock(&workers_.mu_);
      if (workers_.model_.num_sequences() == 0) break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::MutexLock lock(&workers_.mu_);
  EXPECT_EQ(workers_.model_.num_sequences(), 0u);
}

TEST_P(EngineLoopTest, ClientsShareNoRequestIds) {
  workers_.delay_ = absl::Milliseconds(5);
  Start(64);
  auto alice = std::make_shared<ResponseQueue>();
  auto bob = std::make_shared<ResponseQueue>();
  ASSERT_TRUE(engine_->Submit("alice", "x", Request({'a'}, 3000), alice).ok());
  // The same id from another client is another request, not ALREADY_EXISTS...
  ASSERT_TRUE(engine_->Submit("bob", "x", Request({'b'}, 3000), bob).ok());
  // ... but the same client may not reuse a live id.
  const absl::Status again = engine_->Submit("alice", "x", Request({'a'}, 3), std::make_shared<ResponseQueue>());
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  // A client aborts only its own requests.
  EXPECT_FALSE(engine_->Abort("mallory", "x", absl::OkStatus()));
  EXPECT_TRUE(engine_->Abort("alice", "x", absl::OkStatus()));
  Outcome a = Drain(*alice);
  ASSERT_TRUE(a.completed) << a.end;
  EXPECT_EQ(a.complete.finish_reason(), v1::ABORTED);
  v1::GenerateResponse r;
  absl::Status end;
  ASSERT_EQ(bob->Pop(absl::Seconds(10), &r, &end), ResponseQueue::Next::kMessage) << end;
  EXPECT_EQ(r.request_id(), "x");  // responses carry the bare id
  EXPECT_TRUE(engine_->Abort("bob", "x", absl::OkStatus()));
  EXPECT_TRUE(Drain(*bob).completed);
}

TEST_P(EngineLoopTest, CancellationEndsTheStreamWithTheGivenStatus) {
  workers_.delay_ = absl::Milliseconds(5);
  Start(64);
  auto q = Submit("c", Request({'a'}, 3000));
  absl::SleepFor(absl::Milliseconds(30));
  engine_->Abort("client", "c", absl::CancelledError("the client cancelled"));
  Outcome o = Drain(*q);
  EXPECT_EQ(o.end.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(o.completed);
}

// Issue 33, item 4: a stream its client cancels, or whose deadline passes,
// is an abort in the metrics (request_success_total{finished_reason="abort"}),
// not a failure, whether the cancellation reaches the loop as an Abort or as
// a queue that refuses the next chunk. A server-side error still is a failure.
TEST_P(EngineLoopTest, ACancelledStreamCountsAsAnAbortNotAFailure) {
  workers_.delay_ = absl::Milliseconds(5);
  Start(64);
  auto finished = [&] { return metrics_.totals().requests_finished.at("abort"); };
  auto endless = [](std::vector<int32_t> prompt) {  // ends only when its client ends it
    PreparedRequest r = Request(std::move(prompt), 3000);
    r.stop.ignore_eos = true;
    return r;
  };
  const std::vector<absl::Status> client_ends = {absl::CancelledError("the client cancelled"),
                                                 absl::DeadlineExceededError("the deadline passed")};
  for (size_t i = 0; i < client_ends.size(); ++i) {
    const std::string id = absl::StrCat("gone", i);
    auto q = Submit(id, endless({'a', 'b'}));
    v1::GenerateResponse r;
    absl::Status end;
    ASSERT_EQ(q->Pop(absl::Seconds(10), &r, &end), ResponseQueue::Next::kMessage) << end;  // it runs
    ASSERT_TRUE(engine_->Abort("client", id, client_ends[i]));
    EXPECT_EQ(Drain(*q).end.code(), client_ends[i].code());
    ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
    EXPECT_EQ(finished(), i + 1) << client_ends[i];
    EXPECT_EQ(metrics_.totals().requests_failed, 0u) << client_ends[i];
  }
  // The reactor cancels the queue before its Abort arrives: the next chunk is
  // refused, and that too is the client's doing.
  auto q = Submit("dropped", endless({'c'}));
  v1::GenerateResponse r;
  absl::Status end;
  ASSERT_EQ(q->Pop(absl::Seconds(10), &r, &end), ResponseQueue::Next::kMessage) << end;
  q->Cancel(absl::CancelledError("the client went away"));
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(finished(), 3u);
  EXPECT_EQ(metrics_.totals().requests_failed, 0u);
  // A failure the server chose is still counted as one.
  {
    absl::MutexLock lock(&workers_.mu_);
    workers_.fail_next_ = absl::InternalError("rank 0: injected");
  }
  EXPECT_EQ(Drain(*Submit("bad", Request({'d'}, 4))).end.code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(metrics_.totals().requests_failed, 1u);
  EXPECT_EQ(finished(), 3u);
}

TEST_P(EngineLoopTest, QueueFullIsResourceExhausted) {
  workers_.delay_ = absl::Milliseconds(20);
  Start(64, 4, 32, /*max_seqs=*/1, /*max_queue=*/2);
  std::vector<std::shared_ptr<ResponseQueue>> qs;
  absl::Status refused;
  for (int i = 0; i < 6 && refused.ok(); ++i) {
    auto q = std::make_shared<ResponseQueue>();
    refused = engine_->Submit("client", absl::StrCat("q", i), Request({'a', 'b'}, 50), q);
    if (refused.ok()) qs.push_back(q);
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("--max-queue"), absl::string_view::npos);
  EXPECT_LE(qs.size(), 3u);  // one running at most, two queued
  for (auto& q : qs) EXPECT_TRUE(Drain(*q).end.ok());
}

// Rank 0 gave up on a sequence's grammar (SampledToken.error): that request
// ends with INVALID_ARGUMENT and the error's text, its token never output,
// while the request beside it in the same steps gets its whole output.
TEST_P(EngineLoopTest, ATokenWithAnErrorEndsOnlyItsRequest) {
  Start(64);
  {
    absl::MutexLock lock(&workers_.mu_);
    workers_.give_up_on_ = 'g';
  }
  auto bad_q = Submit("bad", Request({'g', 'h'}, 6));
  auto good_q = Submit("good", Request({'a', 'b'}, 6));
  const Outcome bad = Drain(*bad_q);
  const Outcome good = Drain(*good_q);
  EXPECT_EQ(bad.end.code(), absl::StatusCode::kInvalidArgument) << bad.end;
  EXPECT_EQ(bad.end.message(), FakeWorkers::kGaveUp);
  EXPECT_TRUE(bad.tokens.empty()) << "the token sampled without the grammar's mask is not output";
  EXPECT_FALSE(bad.completed);
  EXPECT_TRUE(good.end.ok()) << good.end;
  EXPECT_EQ(good.tokens, FakeContinuation({'a', 'b'}, 6));
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
}

TEST_P(EngineLoopTest, AFailedStepIsInternalForItsRequestsAndTheEngineGoesOn) {
  Start(64);
  {
    absl::MutexLock lock(&workers_.mu_);
    workers_.fail_next_ = absl::InternalError("rank 1: CUDA error: illegal address");
  }
  Outcome bad = Drain(*Submit("a", Request({'a', 'b'}, 4)));
  EXPECT_EQ(bad.end.code(), absl::StatusCode::kInternal);
  EXPECT_NE(bad.end.message().find("illegal address"), absl::string_view::npos) << bad.end;
  Outcome good = Drain(*Submit("b", Request({'a', 'b'}, 4)));
  EXPECT_TRUE(good.end.ok()) << good.end;
  EXPECT_EQ(good.tokens, FakeContinuation({'a', 'b'}, 4));
}

// Issue 15, recovery: a lost worker group ends the requests that ran (their
// KV cache went with it) and refuses new ones; requests that never ran wait,
// and after Resume (a fresh group that remembers nothing) they and new ones
// get their exact outputs: nothing the old cache held is assumed, prefix
// cache included (the fake worker would answer a step that relies on state it
// lacks with an error or a wrong token).
TEST_P(EngineLoopTest, ALostGroupEndsWhatRanKeepsTheQueueAndResumesOnAFreshCache) {
  workers_.delay_ = absl::Milliseconds(5);
  Start(/*num_blocks=*/64, /*block_size=*/4, /*budget=*/32, /*max_seqs=*/1);
  const std::vector<int32_t> prompt = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'};
  auto ran = Submit("ran", Request(prompt, 3000));
  auto cached = Submit("cached", Request(prompt, 5));  // would share ran's prefix blocks
  absl::SleepFor(absl::Milliseconds(30));
  auto queued = Submit("queued", Request({'q', 'r'}, 6));
  auto aborted = Submit("aborted", Request({'x'}, 6));
  {
    absl::MutexLock lock(&workers_.mu_);
    workers_.fail_next_ = absl::UnavailableError("worker rank 1 (h, pid 7) died: its connection closed");
  }
  const Outcome lost = Drain(*ran);
  EXPECT_EQ(lost.end.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(lost.end.message().find("worker rank 1"), absl::string_view::npos) << lost.end;
  ASSERT_TRUE(engine_->WaitSuspended());

  auto refused_queue = std::make_shared<ResponseQueue>();
  const absl::Status refused = engine_->Submit("client", "new", Request({'a'}, 3), refused_queue);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("worker rank 1"), absl::string_view::npos) << refused;
  // A waiting request's deadline or cancel still ends it while suspended.
  ASSERT_TRUE(engine_->Abort("client", "aborted", absl::DeadlineExceededError("deadline")));
  EXPECT_EQ(Drain(*aborted).end.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(engine_->stats().running, 0);
  EXPECT_EQ(engine_->stats().waiting, 2);

  {
    absl::MutexLock lock(&workers_.mu_);
    workers_.model_ = testing_util::FakeStepWorker();  // the new group holds nothing
  }
  engine_->Resume(/*num_blocks=*/40);
  EXPECT_EQ(engine_->stats().num_blocks, 40);
  for (auto& [q, p, n] : {std::tuple(cached, prompt, 5), std::tuple(queued, std::vector<int32_t>{'q', 'r'}, 6)}) {
    const Outcome o = Drain(*q);
    ASSERT_TRUE(o.end.ok()) << o.end;
    EXPECT_EQ(o.tokens, FakeContinuation(p, n));
  }
  const Outcome again = Drain(*Submit("again", Request(prompt, 4)));
  ASSERT_TRUE(again.end.ok()) << again.end;
  EXPECT_EQ(again.tokens, FakeContinuation(prompt, 4));
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(engine_->stats().free_blocks, 40);
}

TEST_P(EngineLoopTest, TooLongForTheWholeCacheIsRefusedAtAdmission) {
  Start(/*num_blocks=*/3, /*block_size=*/4);
  auto q = std::make_shared<ResponseQueue>();
  const absl::Status refused = engine_->Submit("client", "big", Request(std::vector<int32_t>(13, 'a'), 2), q);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("the prompt of 13 tokens needs 4 KV blocks of 4 tokens but the whole cache "
                                   "holds 3"),
            absl::string_view::npos)
      << refused;
  // The largest prompt that fits (12 tokens = 3 blocks) is served, and the id is free again.
  Outcome fits = Drain(*Submit("big", Request(std::vector<int32_t>(12, 'a'), 1)));
  EXPECT_TRUE(fits.end.ok()) << fits.end;
}

TEST_P(EngineLoopTest, IdleLoopRunsNoSteps) {
  Start(64);
  Drain(*Submit("a", Request({'a'}, 2)));
  int before;
  {
    absl::MutexLock lock(&workers_.mu_);
    before = workers_.steps_;
  }
  absl::SleepFor(absl::Milliseconds(100));
  absl::MutexLock lock(&workers_.mu_);
  EXPECT_LE(workers_.steps_, before + 1);  // at most the step that drops the finished sequence
}

TEST_P(EngineLoopTest, ASequenceThatStopsNeverStreamsTheTokenComputedAhead) {
  workers_.model_.set_eos_after(9, testing::kEnd);
  Start(64);
  Outcome by_length = Drain(*Submit("len", Request({'a', 'b', 'c'}, 3)));
  Outcome by_eos = Drain(*Submit("eos", Request({'x', 'y', 'z'}, 100)));
  ASSERT_TRUE(by_length.end.ok() && by_eos.end.ok()) << by_length.end << by_eos.end;
  EXPECT_EQ(by_length.tokens, FakeContinuation({'a', 'b', 'c'}, 3));
  EXPECT_EQ(by_length.complete.usage().completion_tokens(), 3u);
  ASSERT_EQ(by_eos.tokens.size(), 7u);  // 3 + 6 = 9 tokens, then EOS
  EXPECT_EQ(by_eos.tokens.back(), testing::kEnd);
  EXPECT_EQ(by_eos.complete.finish_reason(), v1::EOS);
  absl::MutexLock lock(&workers_.mu_);
  // With overlap the workers sampled one token more for each (the step sent
  // before the stop was seen); it never reached the stream.
  const int extra = GetParam() ? 1 : 0;
  EXPECT_EQ(workers_.sampled_[1 * kChoiceStride], 3 + extra);  // the first request's sequence
  EXPECT_EQ(workers_.sampled_[2 * kChoiceStride], 7 + extra);
  EXPECT_EQ(workers_.max_outstanding_, GetParam() ? 2 : 1);
}

// A stop string is found by the output thread, which has the engine finish
// the sequence: the stream ends exactly at the match, the blocks come back,
// and the workers computed at most two tokens past it (the output threads may
// lag the engine by one batch; docs/architecture.md, "The step pipeline").
TEST_P(EngineLoopTest, AStopStringEndsTheStreamAndItsSequence) {
  workers_.delay_ = absl::Milliseconds(2);
  Start(64);
  const std::vector<int32_t> prompt = {'s', 't', 'o', 'p'};
  const std::vector<int32_t> free_run = FakeContinuation(prompt, 40);
  const std::string text(free_run.begin(), free_run.end());
  const std::string stop = text.substr(12, 2);
  const size_t at = text.find(stop);  // the first match: its last byte's token ends the stream
  PreparedRequest r = Request(prompt, 40);
  r.stop.stop = {stop};
  Outcome o = Drain(*Submit("s", std::move(r)));
  ASSERT_TRUE(o.end.ok()) << o.end;
  ASSERT_TRUE(o.completed);
  EXPECT_EQ(o.complete.finish_reason(), v1::STOP_SEQUENCE);
  EXPECT_EQ(o.complete.matched_stop(), stop);
  EXPECT_EQ(o.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + static_cast<long>(at + 2)));
  EXPECT_EQ(o.text, text.substr(0, at));
  EXPECT_EQ(o.complete.usage().completion_tokens(), at + 2);
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(engine_->stats().free_blocks, 64);
  EXPECT_EQ(engine_->stats().running, 0);
  EXPECT_EQ(metrics_.totals().requests_finished.at("stop"), 1u);
  absl::MutexLock lock(&workers_.mu_);
  EXPECT_LE(workers_.sampled_[kChoiceStride], static_cast<int>(at) + 2 + 2);
}

// n > 1: each choice streams with its index and its own Complete; the
// stream ends after the last; greedy choices equal a request of one choice,
// also when a tiny pool preempts some of them; every block comes back.
TEST_P(EngineLoopTest, ChoicesStreamWithTheirIndexAndEndAfterTheLast) {
  Start(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/13, /*max_seqs=*/8);
  const std::vector<int32_t> prompt = {'a', 'b', 'c', 'a', 'b', 'c', 'a', 'b', 'c', 'd'};
  PreparedRequest r = Request(prompt, 14);
  r.n = 5;
  auto q = Submit("n5", std::move(r));
  auto other = Submit("one", Request({'z', 'y'}, 20));
  absl::Status end;
  const std::map<uint32_t, Outcome> choices = DrainChoices(*q, &end);
  ASSERT_TRUE(end.ok()) << end;
  ASSERT_EQ(choices.size(), 5u);
  for (const auto& [index, o] : choices) {
    ASSERT_TRUE(o.completed) << "choice " << index;
    EXPECT_EQ(o.tokens, FakeContinuation(prompt, 14)) << "choice " << index;
    EXPECT_EQ(o.complete.usage().completion_tokens(), 14u);
    EXPECT_EQ(o.complete.finish_reason(), v1::LENGTH);
  }
  EXPECT_TRUE(Drain(*other).end.ok());
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(engine_->stats().free_blocks, 16);
  EXPECT_EQ(engine_->stats().running, 0);
  EXPECT_EQ(metrics_.totals().requests_finished.at("length"), 2u);  // requests, not choices
  PreparedRequest too_many = Request(prompt, 2);
  too_many.n = 9;
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->Submit("client", "many", std::move(too_many),
                                                      std::make_shared<ResponseQueue>())));
}

TEST_P(EngineLoopTest, AbortEndsEveryChoiceAndFreesTheirBlocks) {
  workers_.delay_ = absl::Milliseconds(5);
  Start(64);
  PreparedRequest r = Request({'a', 'b', 'c', 'd', 'e', 'f'}, 3000);
  r.n = 3;
  auto q = Submit("long", std::move(r));
  v1::GenerateResponse first;
  absl::Status end;
  ASSERT_EQ(q->Pop(absl::Seconds(10), &first, &end), ResponseQueue::Next::kMessage);  // it runs
  EXPECT_TRUE(engine_->Abort("client", "long", absl::OkStatus()));
  const std::map<uint32_t, Outcome> choices = DrainChoices(*q, &end);
  ASSERT_TRUE(end.ok()) << end;
  ASSERT_EQ(choices.size(), 3u);
  for (const auto& [index, o] : choices) {
    ASSERT_TRUE(o.completed) << "choice " << index;
    EXPECT_EQ(o.complete.finish_reason(), v1::ABORTED);
  }
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(engine_->stats().free_blocks, 64);
  for (int i = 0; i < 500; ++i) {
    {
      absl::MutexLock lock(&workers_.mu_);
      if (workers_.model_.num_sequences() == 0) break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::MutexLock lock(&workers_.mu_);
  EXPECT_EQ(workers_.model_.num_sequences(), 0u);
}

// A passed deadline (the service aborts with its status) ends every choice
// with it, and counts once, as an abort.
TEST_P(EngineLoopTest, ADeadlineEndsEveryChoice) {
  workers_.delay_ = absl::Milliseconds(5);
  Start(64);
  PreparedRequest r = Request({'q', 'r', 's'}, 3000);
  r.n = 3;
  auto q = Submit("late", std::move(r));
  v1::GenerateResponse first;
  absl::Status end;
  ASSERT_EQ(q->Pop(absl::Seconds(10), &first, &end), ResponseQueue::Next::kMessage);
  EXPECT_TRUE(engine_->Abort("client", "late", absl::DeadlineExceededError("the deadline passed")));
  DrainChoices(*q, &end);
  EXPECT_TRUE(absl::IsDeadlineExceeded(end)) << end;
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(engine_->stats().free_blocks, 64);
  EXPECT_EQ(metrics_.totals().requests_finished.at("abort"), 1u);
}

// One choice that fails (its client fell behind: one stream for all) ends the
// stream; the others are finished unseen and the request's id comes free.
TEST_P(EngineLoopTest, AFailedChoiceEndsTheStreamAndTheOthers) {
  Start(64);
  PreparedRequest r = Request({'a', 'b', 'c'}, 3000);
  r.n = 4;
  auto q = std::make_shared<ResponseQueue>(/*max_buffered=*/8);
  ASSERT_TRUE(engine_->Submit("client", "slow", std::move(r), q).ok());
  ASSERT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(engine_->stats().free_blocks, 64);
  absl::Status end;
  DrainChoices(*q, &end);
  EXPECT_TRUE(absl::IsResourceExhausted(end)) << end;
}

INSTANTIATE_TEST_SUITE_P(Pipeline, EngineLoopTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Overlap" : "LockStep";
                         });

// Data-parallel groups (coordinator/engine_groups.h): D engine loops, each
// with its own fake workers, KV event publisher and prefix cache, behind one
// Submit routed by a DpRouter fed by the publishers.
class EngineGroupsTest : public EngineLoopTest {
 protected:
  void StartGroups(int dp, DpRouting policy, int64_t num_blocks = 64, int64_t load_bound = 16) {
    router_ = std::make_unique<DpRouter>(
        DpRouterOptions{.groups = dp, .policy = policy, .block_size = 4, .load_bound = load_bound});
    std::vector<EngineLoop*> loops;
    for (int g = 0; g < dp; ++g) {
      group_workers_.emplace_back();
      events_.push_back(std::make_unique<KvEventPublisher>(g, /*block_size=*/4));
      events_.back()->FeedRouter(router_.get());
      EngineLoopOptions o;
      o.scheduler = {.max_num_batched_tokens = 32, .max_num_seqs = 64, .max_queue = 1000};
      o.num_blocks = num_blocks;
      o.block_size = 4;
      o.max_model_len = 4096;
      o.eos_token_ids = {testing::kEnd};
      o.overlap = GetParam();
      o.dp_rank = g;
      o.kv_events = events_.back().get();
      o.on_retired = [this](const std::string& client, const std::string& id) { groups_->OnRetired(client, id); };
      loops_.push_back(std::make_unique<EngineLoop>(*tokenizer_, o, group_workers_.back().Transport()));
      loops.push_back(loops_.back().get());
    }
    groups_ = std::make_unique<EngineGroups>(std::move(loops), *router_);
    for (auto& loop : loops_) loop->Start();
  }
  std::shared_ptr<ResponseQueue> SubmitTo(const std::string& id, PreparedRequest r, int* group) {
    auto q = std::make_shared<ResponseQueue>();
    absl::Status s = groups_->Submit("client", id, std::move(r), q, group);
    EXPECT_TRUE(s.ok()) << s;
    return q;
  }
  void TearDown() override {
    for (auto& loop : loops_) loop->Stop();  // before the groups, the router and the publishers go
  }

  std::unique_ptr<DpRouter> router_;
  std::deque<FakeWorkers> group_workers_;
  std::vector<std::unique_ptr<KvEventPublisher>> events_;
  std::vector<std::unique_ptr<EngineLoop>> loops_;
  std::unique_ptr<EngineGroups> groups_;
};

// --dp 2 gives every request the tokens --dp 1 gives it (greedy; the fake
// workers' tokens are a function of the sequence alone, as a real model's
// greedy tokens are of its prompt), and cache-aware routing keeps a
// conversation's turns on the group that holds its history.
TEST_P(EngineGroupsTest, TwoGroupsGiveEveryRequestTheOneGroupsOutput) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  // Six conversations of three turns, each turn resending the history (prompt + answer) plus a question.
  std::vector<std::vector<int32_t>> history(6);
  for (auto& h : history) {
    h.resize(9 + rng() % 7);
    for (auto& t : h) t = 'a' + static_cast<int32_t>(rng() % 20);
  }
  auto run = [&](int dp) {
    group_workers_.clear();
    events_.clear();
    loops_.clear();
    StartGroups(dp, DpRouting::kCacheAware);
    std::vector<std::vector<int32_t>> turns = history;
    std::vector<std::vector<int32_t>> outputs;
    std::vector<int> conversation_group(turns.size(), -1);
    int64_t cached = 0;
    for (int turn = 0; turn < 3; ++turn) {
      std::vector<std::shared_ptr<ResponseQueue>> qs;
      for (size_t c = 0; c < turns.size(); ++c) {
        int g = -1;
        qs.push_back(SubmitTo(absl::StrCat("c", c, "t", turn), Request(turns[c], 5 + static_cast<int>(c)), &g));
        if (turn > 0) {
          EXPECT_EQ(g, conversation_group[c]) << "conversation " << c << " turn " << turn;
        }
        conversation_group[c] = g;
      }
      for (size_t c = 0; c < turns.size(); ++c) {
        const Outcome o = Drain(*qs[c]);
        EXPECT_TRUE(o.end.ok()) << o.end;
        outputs.push_back(o.tokens);
        cached += o.complete.usage().cached_tokens();
        turns[c].insert(turns[c].end(), o.tokens.begin(), o.tokens.end());
        turns[c].push_back('?');
      }
    }
    EXPECT_TRUE(groups_->WaitIdle(absl::Now() + absl::Seconds(5)));
    for (int g = 0; g < dp; ++g) EXPECT_EQ(router_->load(g), 0) << "group " << g;
    EXPECT_GT(cached, 0) << "later turns reuse their history's blocks";
    if (dp > 1) {
      EXPECT_NE(std::count(conversation_group.begin(), conversation_group.end(), 0), 0) << "group 0 served none";
      EXPECT_NE(std::count(conversation_group.begin(), conversation_group.end(), 1), 0) << "group 1 served none";
    }
    for (auto& loop : loops_) loop->Stop();
    return outputs;
  };
  const std::vector<std::vector<int32_t>> one = run(1);
  const std::vector<std::vector<int32_t>> two = run(2);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "request " << i;
}

// A group whose workers are lost ends only the requests it ran; the other
// group keeps serving, new requests avoid the lost group, and once it is
// back (Resume) it serves again.
TEST_P(EngineGroupsTest, ALostGroupFailsOnlyItsRequestsWhileTheOtherServes) {
  StartGroups(2, DpRouting::kLeastLoad);
  for (auto& w : group_workers_) w.delay_ = absl::Milliseconds(2);
  int g0 = -1, g1 = -1;
  const std::vector<int32_t> p0 = {'a', 'b', 'c', 'd', 'e'}, p1 = {'v', 'w', 'x', 'y', 'z'};
  auto on0 = SubmitTo("long0", Request(p0, 3000), &g0);
  auto on1 = SubmitTo("long1", Request(p1, 60), &g1);
  ASSERT_EQ(g0, 0);
  ASSERT_EQ(g1, 1);
  {
    v1::GenerateResponse r;
    absl::Status end;
    ASSERT_EQ(on0->Pop(absl::Seconds(10), &r, &end), ResponseQueue::Next::kMessage);  // group 0 runs it
  }
  {
    absl::MutexLock lock(&group_workers_[0].mu_);
    group_workers_[0].fail_next_ = absl::UnavailableError("worker rank 0 (h, pid 7) died: its connection closed");
  }
  const Outcome lost = Drain(*on0);
  EXPECT_EQ(lost.end.code(), absl::StatusCode::kUnavailable) << lost.end;
  ASSERT_TRUE(groups_->group(0).WaitSuspended());
  groups_->SetAvailable(0, false);  // what the coordinator does on the loss
  // Group 1 was not touched: its request completes, and new ones go there.
  const Outcome kept = Drain(*on1);
  ASSERT_TRUE(kept.end.ok()) << kept.end;
  EXPECT_EQ(kept.tokens, FakeContinuation(p1, 60));
  for (int i = 0; i < 4; ++i) {
    int g = -1;
    const std::vector<int32_t> p = {'m', static_cast<int32_t>('a' + i)};
    const Outcome o = Drain(*SubmitTo(absl::StrCat("during", i), Request(p, 7), &g));
    EXPECT_EQ(g, 1) << "request " << i << " went to the lost group";
    ASSERT_TRUE(o.end.ok()) << o.end;
    EXPECT_EQ(o.tokens, FakeContinuation(p, 7));
  }
  // Group 0 recovers (a new worker group, an empty cache) and serves again.
  {
    absl::MutexLock lock(&group_workers_[0].mu_);
    group_workers_[0].model_ = testing_util::FakeStepWorker();
  }
  groups_->group(0).Resume(/*num_blocks=*/64);
  groups_->SetAvailable(0, true);
  int g = -1;
  const Outcome back = Drain(*SubmitTo("after", Request(p0, 9), &g));
  EXPECT_EQ(g, 0) << "least-load picks the recovered, idle group";
  ASSERT_TRUE(back.end.ok()) << back.end;
  EXPECT_EQ(back.tokens, FakeContinuation(p0, 9));
  ASSERT_TRUE(groups_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(router_->load(0), 0);
  EXPECT_EQ(router_->load(1), 0);
}

TEST_P(EngineGroupsTest, ARequestIdIsLiveOnceAcrossGroupsAndAbortFindsItsGroup) {
  StartGroups(2, DpRouting::kRoundRobin);
  for (auto& w : group_workers_) w.delay_ = absl::Milliseconds(2);
  int g = -1;
  auto q = SubmitTo("same", Request({'a', 'b'}, 3000), &g);
  EXPECT_EQ(g, 0);
  // Round-robin would send the second to group 1: the id is still live in group 0.
  const absl::Status again = groups_->Submit("client", "same", Request({'c'}, 3), std::make_shared<ResponseQueue>());
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_TRUE(groups_->Abort("client", "same", absl::OkStatus()));
  EXPECT_FALSE(groups_->Abort("client", "nope", absl::OkStatus()));
  const Outcome o = Drain(*q);
  ASSERT_TRUE(o.end.ok()) << o.end;
  EXPECT_EQ(o.complete.finish_reason(), v1::ABORTED);
  ASSERT_TRUE(groups_->WaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(router_->load(0), 0);
  // Free again: the id may be used anew.
  const Outcome next = Drain(*SubmitTo("same", Request({'c'}, 3), &g));
  ASSERT_TRUE(next.end.ok()) << next.end;
  EXPECT_EQ(next.tokens, FakeContinuation({'c'}, 3));
}

INSTANTIATE_TEST_SUITE_P(Pipeline, EngineGroupsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Overlap" : "LockStep";
                         });

}  // namespace
}  // namespace tpserve
