// ScheduledStep -> internal Step: new sequences go out whole, known ones as
// diffs, decodes carry the token sampled last step, order keeps prefills first.
#include "coordinator/step_builder.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tpserve {
namespace {

namespace iv1 = tpserve::internal::v1;

std::vector<int32_t> Ids(const google::protobuf::RepeatedField<int32_t>& f) { return {f.begin(), f.end()}; }

class StepBuilderTest : public ::testing::Test {
 protected:
  iv1::Step Build(const ScheduledStep& step, uint64_t id) {
    return BuildStep(step, id, [this](uint64_t seq) -> const iv1::SamplingParams& {
      looked_up_.push_back(seq);
      return sampling_;
    });
  }
  iv1::SamplingParams sampling_;
  std::vector<uint64_t> looked_up_;
};

TEST_F(StepBuilderTest, NewSequenceCarriesEverything) {
  sampling_.set_temperature(0.7f);
  sampling_.set_has_seed(true);
  sampling_.set_seed(99);
  Sequence seq;
  seq.id = 7;
  seq.tokens = {11, 12, 13, 14, 15, 16, 17, 18, 19};  // 7 prompt + 2 output (after a preemption)
  seq.num_prompt_tokens = 7;
  seq.num_computed_tokens = 4;  // a cached prefix of one 4-token block
  ScheduledStep step;
  step.dropped = {3, 5};
  step.sequences.push_back({&seq, 5, /*is_new=*/true, /*new_blocks=*/{8, 2, 6}, /*sample=*/true});
  const iv1::Step out = Build(step, 42);
  EXPECT_EQ(out.step_id(), 42u);
  EXPECT_EQ(std::vector<uint64_t>(out.finished().begin(), out.finished().end()), (std::vector<uint64_t>{3, 5}));
  ASSERT_EQ(out.new_sequences_size(), 1);
  EXPECT_EQ(out.continuing_size(), 0);
  const iv1::NewSequence& n = out.new_sequences(0);
  EXPECT_EQ(n.seq_id(), 7u);
  EXPECT_EQ(Ids(n.prompt_token_ids()), (std::vector<int32_t>{11, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(Ids(n.output_token_ids()), (std::vector<int32_t>{18, 19}));
  EXPECT_EQ(Ids(n.token_ids()), (std::vector<int32_t>{15, 16, 17, 18, 19}));
  EXPECT_EQ(n.num_computed_tokens(), 4u);
  EXPECT_EQ(Ids(n.block_ids()), (std::vector<int32_t>{8, 2, 6}));
  EXPECT_TRUE(n.sample());
  EXPECT_FLOAT_EQ(n.sampling().temperature(), 0.7f);
  EXPECT_EQ(n.sampling().seed(), 99u);
  EXPECT_EQ(looked_up_, (std::vector<uint64_t>{7}));
  EXPECT_EQ(std::vector<uint64_t>(out.order().begin(), out.order().end()), (std::vector<uint64_t>{7}));
}

TEST_F(StepBuilderTest, ContinuingChunkAndDecodeAreDiffs) {
  Sequence chunked;  // a prefill in its second chunk
  chunked.id = 1;
  chunked.tokens = {1, 2, 3, 4, 5, 6, 7};
  chunked.num_prompt_tokens = 7;
  chunked.num_computed_tokens = 3;
  Sequence decode;  // sampled 40 last step
  decode.id = 2;
  decode.tokens = {9, 9, 9, 40};
  decode.num_prompt_tokens = 3;
  decode.num_computed_tokens = 3;
  ScheduledStep step;
  step.sequences.push_back({&chunked, 2, false, {5}, false});
  step.sequences.push_back({&decode, 1, false, {}, true});
  step.num_prefills = 1;
  const iv1::Step out = Build(step, 1);
  EXPECT_TRUE(looked_up_.empty()) << "known sequences must not resend their sampling parameters";
  EXPECT_EQ(out.new_sequences_size(), 0);
  ASSERT_EQ(out.continuing_size(), 2);
  EXPECT_EQ(out.continuing(0).seq_id(), 1u);
  EXPECT_EQ(Ids(out.continuing(0).token_ids()), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(Ids(out.continuing(0).new_block_ids()), (std::vector<int32_t>{5}));
  EXPECT_FALSE(out.continuing(0).sample());
  EXPECT_EQ(Ids(out.continuing(1).token_ids()), (std::vector<int32_t>{40}));
  EXPECT_TRUE(out.continuing(1).new_block_ids().empty());
  EXPECT_TRUE(out.continuing(1).sample());
  EXPECT_EQ(std::vector<uint64_t>(out.order().begin(), out.order().end()), (std::vector<uint64_t>{1, 2}));
}

// Random steps from the real scheduler: every token to compute is exactly the
// scheduler's tokens[num_computed, +n), every block id the workers learn of is
// the table's, and the order is prefills first.
TEST_F(StepBuilderTest, MatchesTheSchedulerOverRandomRuns) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  BlockManager blocks(23, 4);
  Scheduler scheduler(blocks, {.max_num_batched_tokens = 13, .max_num_seqs = 5, .max_queue = 100});
  std::vector<std::vector<int32_t>> tables(40);   // what the workers would hold, by seq id
  std::vector<std::vector<int32_t>> computed(40); // tokens the workers computed, by seq id
  uint64_t next = 1;
  for (int iter = 0; iter < 200; ++iter) {
    if (next < 40 && rng() % 3 == 0) {
      std::vector<int32_t> prompt(1 + rng() % 19);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % 7);  // small alphabet: prefix hits
      ASSERT_TRUE(scheduler.Add(next++, prompt).ok());
    }
    ScheduledStep step = scheduler.Schedule();
    const iv1::Step out = Build(step, static_cast<uint64_t>(iter));
    for (uint64_t id : out.finished()) {
      tables[id].clear();
      computed[id].clear();
    }
    for (const auto& n : out.new_sequences()) {
      tables[n.seq_id()] = Ids(n.block_ids());
      std::vector<int32_t> all = Ids(n.prompt_token_ids());
      for (int32_t t : n.output_token_ids()) all.push_back(t);
      computed[n.seq_id()].assign(all.begin(), all.begin() + n.num_computed_tokens());
      for (int32_t t : n.token_ids()) computed[n.seq_id()].push_back(t);
    }
    for (const auto& c : out.continuing()) {
      for (int32_t b : c.new_block_ids()) tables[c.seq_id()].push_back(b);
      for (int32_t t : c.token_ids()) computed[c.seq_id()].push_back(t);
    }
    bool seen_decode = false;
    ASSERT_EQ(out.order_size(), static_cast<int>(step.sequences.size()));
    for (size_t i = 0; i < step.sequences.size(); ++i) {
      const Sequence& seq = *step.sequences[i].seq;
      EXPECT_EQ(out.order(static_cast<int>(i)), seq.id);
      if (step.sequences[i].num_tokens == 1) seen_decode = true;
      else EXPECT_FALSE(seen_decode) << "a prefill after a decode";
      EXPECT_EQ(tables[seq.id], seq.block_table) << "seq " << seq.id;
      const auto end = seq.num_computed_tokens + step.sequences[i].num_tokens;
      EXPECT_EQ(computed[seq.id], std::vector<int32_t>(seq.tokens.begin(), seq.tokens.begin() + end))
          << "seq " << seq.id;
    }
    std::vector<std::pair<uint64_t, int32_t>> sampled;
    for (const auto& s : step.sequences) {
      if (s.sample) sampled.emplace_back(s.seq->id, static_cast<int32_t>(rng() % 7));
    }
    scheduler.OnStepDone(step, sampled);
    for (const auto& s : step.sequences) {
      if (s.seq->num_output_tokens() >= 1 + static_cast<int64_t>(s.seq->id % 5)) scheduler.Finish(s.seq->id);
    }
  }
}

}  // namespace
}  // namespace tpserve
