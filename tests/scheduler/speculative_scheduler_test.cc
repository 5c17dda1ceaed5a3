// The scheduler with a Drafter (speculative decoding, scheduler.h): over
// random prompts with shared prefixes, chunked prefill and a pool small
// enough to preempt, in lock-step and with one step in flight ahead, a run
// with proposals gives every sequence the output of a run without them;
// rejected proposals leave no trace (every table holds exactly the blocks of
// its computed tokens after each step, the prefix cache ends with the same
// blocks, every block is free at the end); and proposals were accepted, so
// the comparison is not vacuous.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "scheduler/scheduler.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

// The model: the next token is a function of every token before it.
int32_t NextToken(std::span<const int32_t> context) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(h % 7);  // a small vocabulary: outputs repeat
}

// Proposes the true continuation with each token wrong with probability p;
// every third sequence never speculates. Never past max_tokens.
class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(uint64_t seed, double p, int64_t max_tokens) : rng_(seed), p_(p), max_tokens_(max_tokens) {}
  bool Speculates(const Sequence& seq, int32_t) override { return seq.id % 3 != 2; }
  int32_t Propose(const Sequence& seq, std::span<int32_t> out) override {
    EXPECT_EQ(seq.num_pending_tokens, 0) << "a proposal must follow the sequence's real last token";
    std::vector<int32_t> context = seq.tokens;
    const int64_t n = std::min<int64_t>(std::ssize(out), max_tokens_ - seq.num_output_tokens() - 1);
    for (int64_t i = 0; i < n; ++i) {
      int32_t t = NextToken(context);
      if (std::bernoulli_distribution(p_)(rng_)) t = (t + 1) % 7;
      out[static_cast<size_t>(i)] = t;
      context.push_back(t);
    }
    proposed += std::max<int64_t>(n, 0);
    return static_cast<int32_t>(std::max<int64_t>(n, 0));
  }
  int64_t proposed = 0;

 private:
  std::mt19937_64 rng_;
  double p_;
  int64_t max_tokens_;
};

// The workers' answer to a step once its inputs are known (the steps before
// it applied): one token per sampled sequence, and for one with drafts the
// greedy verification's a + 1.
std::vector<std::pair<uint64_t, int32_t>> Answer(const Scheduler& sched, const ScheduledStep& step,
                                                 int64_t* accepted) {
  std::vector<std::pair<uint64_t, int32_t>> sampled;
  for (const ScheduledSequence& s : step.sequences) {
    const Sequence* seq = sched.Find(s.id);
    if (!s.sample || seq == nullptr || seq->num_preemptions != s.preemptions) {
      if (s.sample && seq != nullptr) {  // preempted since: its token still counts
        const int64_t end = s.start + s.num_tokens - std::ssize(s.drafts);
        sampled.emplace_back(s.id, NextToken(std::span<const int32_t>(seq->tokens).first(static_cast<size_t>(end))));
      }
      continue;
    }
    const int64_t end = s.start + s.num_tokens - std::ssize(s.drafts);
    std::vector<int32_t> context(seq->tokens.begin(), seq->tokens.begin() + end);
    for (size_t i = 0; i <= s.drafts.size(); ++i) {
      const int32_t target = NextToken(context);
      sampled.emplace_back(s.id, target);
      if (i == s.drafts.size() || target != s.drafts[i]) break;
      context.push_back(target);
      ++*accepted;
    }
  }
  return sampled;
}

struct Outcome {
  std::map<uint64_t, std::vector<int32_t>> outputs;
  std::set<uint64_t> cached;  // the prefix cache's hashes at the end
  int64_t accepted = 0, proposed = 0, preemptions = 0;
};

// Generates max_tokens for every prompt; `depth` steps in flight (1: lock-step).
Outcome Generate(const std::vector<std::vector<int32_t>>& prompts, int64_t num_blocks, int depth, Drafter* drafter,
             int64_t max_tokens) {
  BlockManager blocks(num_blocks, 4);
  Scheduler sched(blocks, {.max_num_batched_tokens = 24, .max_num_seqs = 8, .max_queue = 1024,
                           .num_speculative_tokens = 4, .max_num_draft_tokens = 12});
  sched.set_drafter(drafter);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_TRUE(sched.Add(i, prompts[i]).ok());
  Outcome run;
  std::deque<ScheduledStep> in_flight;
  auto receive = [&] {
    ScheduledStep step = std::move(in_flight.front());
    in_flight.pop_front();
    const auto sampled = Answer(sched, step, &run.accepted);
    sched.OnStepDone(step, sampled);
    for (const auto& [id, token] : sampled) {
      const Sequence* seq = sched.Find(id);
      if (seq == nullptr || seq->num_output_tokens() < max_tokens) continue;
      EXPECT_EQ(seq->num_output_tokens(), max_tokens) << "a proposal went past max_tokens";
      run.outputs[id].assign(seq->output_tokens().begin(), seq->output_tokens().end());
      sched.Finish(id);
    }
    // Rejected proposals leave no trace: a table holds the blocks of its
    // computed tokens (and, with a step in flight, of that step's).
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Sequence* seq = sched.Find(i);
      if (seq == nullptr || seq->status != SequenceStatus::kRunning) continue;
      EXPECT_EQ(std::ssize(seq->block_table), blocks.BlocksFor(seq->num_computed_tokens)) << "sequence " << i;
    }
  };
  for (int iter = 0; iter < 100000 && !(sched.idle() && in_flight.empty()); ++iter) {
    ScheduledStep step = sched.Schedule();
    EXPECT_TRUE(step.unservable.empty());
    int64_t rows = 0;
    for (const ScheduledSequence& s : step.sequences) rows += std::ssize(s.drafts);
    EXPECT_LE(rows, 12);
    EXPECT_LE(step.num_tokens, 24);
    const bool sent = !step.empty();
    if (sent) in_flight.push_back(std::move(step));
    if (!in_flight.empty() && (std::ssize(in_flight) == depth || !sent)) receive();
  }
  EXPECT_TRUE(sched.idle());
  EXPECT_EQ(blocks.num_free_blocks(), num_blocks) << "a block was not given back";
  const std::vector<uint64_t> hashes = blocks.CachedHashes();
  run.cached.insert(hashes.begin(), hashes.end());
  run.preemptions = sched.num_preemptions();
  return run;
}

struct Case {
  int depth;           // 1: lock-step, 2: one step in flight ahead
  int64_t num_blocks;  // 12: preemptions; 1024: no eviction
  double p;            // each proposed token wrong with probability p
};

class SpeculativeSchedulerTest : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeSchedulerTest, ProposalsChangeNoOutputAndLeaveNoTrace) {
  const Case c = GetParam();
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> prefix(9);
  for (int32_t& t : prefix) t = static_cast<int32_t>(rng() % 7);
  for (int i = 0; i < 40; ++i) {  // lengths 1 to 30, some sharing a prefix (prefix-cache hits)
    std::vector<int32_t> p = i % 4 == 0 ? prefix : std::vector<int32_t>();
    for (int64_t n = 1 + static_cast<int64_t>(rng() % 21); n > 0; --n) p.push_back(static_cast<int32_t>(rng() % 7));
    prompts.push_back(std::move(p));
  }
  constexpr int64_t kMaxTokens = 13;
  const Outcome plain = Generate(prompts, c.num_blocks, c.depth, nullptr, kMaxTokens);
  OracleDrafter drafter(seed, c.p, kMaxTokens);
  const Outcome spec = Generate(prompts, c.num_blocks, c.depth, &drafter, kMaxTokens);
  ASSERT_EQ(plain.outputs.size(), prompts.size()) << "seed " << seed;
  EXPECT_EQ(spec.outputs, plain.outputs) << "seed " << seed;
  // Without evictions (a pool holding every block of the run) the prefix
  // cache ends the same: only blocks full of accepted tokens were hashed. A
  // small pool evicts in another order (a draft's block is taken a step
  // before a plain run would take it), so there only the outputs compare.
  if (c.num_blocks > 12) {
    EXPECT_EQ(spec.cached, plain.cached) << "the prefix cache differs; seed " << seed;
  }
  EXPECT_GT(spec.accepted, 0) << "no proposal was accepted: the comparison proves nothing";
  if (c.p > 0) {
    EXPECT_LT(spec.accepted, drafter.proposed) << "no proposal was rejected";
  }
  if (c.num_blocks <= 12) {
    EXPECT_GT(spec.preemptions, 0) << "the small pool preempted nothing";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SpeculativeSchedulerTest,
                         ::testing::Values(Case{1, 1024, 0.0}, Case{1, 1024, 0.3}, Case{2, 1024, 0.3},
                                           Case{1, 12, 0.3}, Case{2, 12, 0.3}),
                         [](const auto& info) {
                           return std::string(info.param.depth == 1 ? "LockStep" : "Overlap") +
                                  (info.param.num_blocks <= 12 ? "TinyPool" : "") +
                                  (info.param.p > 0 ? "SomeWrong" : "AllRight");
                         });

}  // namespace
}  // namespace tpserve
