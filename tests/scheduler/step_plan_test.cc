// ScheduledStep -> StepPlan: new sequences go out whole, known ones as
// diffs, decodes of the token sampled last step carry no token
// (decode_sampled), order keeps prefills first.
#include "scheduler/step_plan.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

#include "tests/testing/fake_step_worker.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

class StepPlanTest : public ::testing::Test {
 protected:
  StepPlan Build(const ScheduledStep& step) {
    return BuildStepPlan(step, [this](uint64_t seq) -> const SamplingParams& {
      looked_up_.push_back(seq);
      return sampling_;
    });
  }
  SamplingParams sampling_;
  std::vector<uint64_t> looked_up_;
};

TEST_F(StepPlanTest, NewSequenceCarriesEverything) {
  sampling_.temperature = 0.7f;
  sampling_.seed = 99;
  Sequence seq;
  seq.id = 7;
  seq.tokens = {11, 12, 13, 14, 15, 16, 17, 18, 19};  // 7 prompt + 2 output (after a preemption)
  seq.num_prompt_tokens = 7;
  seq.num_computed_tokens = 9;  // a cached prefix of one 4-token block, and this step's 5
  ScheduledStep step;
  step.dropped = {3, 5};
  step.sequences.push_back(
      {.seq = &seq, .id = 7, .start = 4, .num_tokens = 5, .is_new = true, .new_blocks = {8, 2, 6}, .sample = true});
  const StepPlan out = Build(step);
  EXPECT_EQ(out.finished, (std::vector<uint64_t>{3, 5}));
  ASSERT_EQ(out.new_sequences.size(), 1u);
  EXPECT_TRUE(out.continuing.empty());
  const NewSequencePlan& n = out.new_sequences[0];
  EXPECT_EQ(n.seq_id, 7u);
  EXPECT_EQ(n.prompt, (std::vector<int32_t>{11, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(n.output, (std::vector<int32_t>{18, 19}));
  EXPECT_EQ(n.token_ids, (std::vector<int32_t>{15, 16, 17, 18, 19}));
  EXPECT_EQ(n.num_computed_tokens, 4);
  EXPECT_EQ(n.block_ids, (std::vector<int32_t>{8, 2, 6}));
  EXPECT_TRUE(n.sample);
  EXPECT_FLOAT_EQ(n.sampling.temperature, 0.7f);
  EXPECT_EQ(n.sampling.seed.value_or(0), 99u);
  EXPECT_EQ(looked_up_, (std::vector<uint64_t>{7}));
  EXPECT_EQ(out.order, (std::vector<uint64_t>{7}));
}

TEST_F(StepPlanTest, ContinuingChunkAndDecodeAreDiffs) {
  Sequence chunked;  // a prefill in its second chunk
  chunked.id = 1;
  chunked.tokens = {1, 2, 3, 4, 5, 6, 7};
  chunked.num_prompt_tokens = 7;
  chunked.num_computed_tokens = 5;
  Sequence decode;  // its last step sampled a token that may not be back yet
  decode.id = 2;
  decode.tokens = {9, 9, 9};
  decode.num_prompt_tokens = 3;
  decode.num_computed_tokens = 4;
  decode.num_pending_tokens = 1;
  ScheduledStep step;
  step.sequences.push_back({.seq = &chunked, .id = 1, .start = 3, .num_tokens = 2, .new_blocks = {5}});
  step.sequences.push_back(
      {.seq = &decode, .id = 2, .start = 3, .num_tokens = 1, .sample = true, .decode_sampled = true});
  step.num_prefills = 1;
  const StepPlan out = Build(step);
  EXPECT_TRUE(looked_up_.empty()) << "known sequences must not resend their sampling parameters";
  EXPECT_TRUE(out.new_sequences.empty());
  ASSERT_EQ(out.continuing.size(), 2u);
  EXPECT_EQ(out.continuing[0].seq_id, 1u);
  EXPECT_EQ(out.continuing[0].token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(out.continuing[0].new_block_ids, (std::vector<int32_t>{5}));
  EXPECT_FALSE(out.continuing[0].sample);
  EXPECT_FALSE(out.continuing[0].decode_sampled);
  EXPECT_TRUE(out.continuing[1].token_ids.empty());
  EXPECT_TRUE(out.continuing[1].decode_sampled);
  EXPECT_TRUE(out.continuing[1].new_block_ids.empty());
  EXPECT_TRUE(out.continuing[1].sample);
  EXPECT_EQ(out.order, (std::vector<uint64_t>{1, 2}));
}

// Random steps from the real scheduler, run by a worker model that follows
// the diffs alone, lock-step or with one step in flight ahead (the next step
// scheduled before the previous one's tokens are applied): every token a
// worker computes is the scheduler's tokens[start, +n) (a decode_sampled one
// is the token the worker sampled itself), every block id the workers learn
// of is the table's, and the order is prefills first.
class StepPlanPipelineTest : public StepPlanTest, public ::testing::WithParamInterface<int> {};

TEST_P(StepPlanPipelineTest, MatchesTheSchedulerOverRandomRuns) {
  const size_t depth = static_cast<size_t>(GetParam());  // steps in flight at most
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", depth " << depth);
  std::mt19937 rng(seed);
  BlockManager blocks(23, 4);
  Scheduler scheduler(blocks, {.max_num_batched_tokens = 13, .max_num_seqs = 5, .max_queue = 100});
  testing_util::FakeStepWorker workers;  // what the workers hold, from the diffs alone
  std::deque<std::pair<ScheduledStep, std::vector<StepToken>>> in_flight;
  uint64_t next = 1;
  for (int iter = 0; iter < 300; ++iter) {
    if (next < 40 && rng() % 3 == 0) {
      std::vector<int32_t> prompt(1 + rng() % 19);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % 7);  // small alphabet: prefix hits
      ASSERT_TRUE(scheduler.Add(next++, prompt).ok());
    }
    bool sent = false;
    if (in_flight.size() < depth) {
      ScheduledStep step = scheduler.Schedule();
      const StepPlan out = Build(step);
      absl::StatusOr<std::vector<StepToken>> tokens = workers.Run(out);
      ASSERT_TRUE(tokens.ok()) << tokens.status();
      bool seen_decode = false;
      ASSERT_EQ(out.order.size(), step.sequences.size());
      for (size_t i = 0; i < step.sequences.size(); ++i) {
        const ScheduledSequence& s = step.sequences[i];
        const Sequence& seq = *s.seq;
        EXPECT_EQ(out.order[i], seq.id);
        if (s.num_tokens == 1) seen_decode = true;
        else EXPECT_FALSE(seen_decode) << "a prefill after a decode";
        const testing_util::FakeStepWorker::Sequence* held = workers.Find(seq.id);
        ASSERT_NE(held, nullptr) << "seq " << seq.id;
        EXPECT_EQ(held->block_table, seq.block_table) << "seq " << seq.id;
        const int64_t end = s.start + s.num_tokens;
        EXPECT_EQ(end, seq.num_computed_tokens) << "seq " << seq.id;
        ASSERT_EQ(std::ssize(held->tokens), end) << "seq " << seq.id;
        const int64_t known = std::min<int64_t>(end, std::ssize(seq.tokens));  // the rest is pending
        EXPECT_EQ(std::vector<int32_t>(held->tokens.begin(), held->tokens.begin() + known),
                  std::vector<int32_t>(seq.tokens.begin(), seq.tokens.begin() + known))
            << "seq " << seq.id;
      }
      sent = !step.empty();
      if (sent) in_flight.emplace_back(std::move(step), *std::move(tokens));
    }
    if (in_flight.empty() || (in_flight.size() < depth && sent)) continue;
    auto [done, tokens] = std::move(in_flight.front());
    in_flight.pop_front();
    std::vector<std::pair<uint64_t, int32_t>> sampled;
    for (const StepToken& t : tokens) sampled.emplace_back(t.seq_id, t.sampled.token);
    scheduler.OnStepDone(done, sampled);
    for (const auto& [id, token] : sampled) {
      const Sequence* seq = scheduler.Find(id);
      if (seq != nullptr && seq->num_output_tokens() >= 1 + static_cast<int64_t>(id % 5)) scheduler.Finish(id);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(InFlight, StepPlanPipelineTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 1 ? "LockStep" : "OneStepAhead";
                         });

// Rank 0's tokens, in whatever order they came, line up with the step's
// sampled sequences in step order; an unsampled chunk has no entry and a
// sequence rank 0 answered nothing for gets nullptr.
TEST(TokensInStepOrder, FollowsTheStepAndMarksMissingTokens) {
  ScheduledStep step;
  step.sequences.push_back({.id = 4, .num_tokens = 8, .sample = false});
  step.sequences.push_back({.id = 1, .num_tokens = 1, .sample = true});
  step.sequences.push_back({.id = 2, .num_tokens = 1, .sample = true});
  step.sequences.push_back({.id = 3, .num_tokens = 1, .sample = true});
  const std::vector<StepToken> tokens = {{.seq_id = 3, .sampled = {.token = 30}},
                                         {.seq_id = 1, .sampled = {.token = 10}}};
  const std::vector<const StepToken*> ordered = TokensInStepOrder(step, tokens);
  ASSERT_EQ(ordered.size(), 3u);
  ASSERT_NE(ordered[0], nullptr);
  EXPECT_EQ(ordered[0]->sampled.token, 10);
  EXPECT_EQ(ordered[1], nullptr);
  ASSERT_NE(ordered[2], nullptr);
  EXPECT_EQ(ordered[2]->sampled.token, 30);
  EXPECT_EQ(TokensInStepOrder(step, {}), (std::vector<const StepToken*>(3, nullptr)));
}

}  // namespace
}  // namespace tpserve
