// StepPlan <-> worker.proto Step, SamplingParams and the sampled tokens: what
// the coordinator sends is what the worker runs, field for field.
#include "proto/step_convert.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace tpserve {
namespace {

namespace iv1 = tpserve::internal::v1;

SamplingParams Seeded() {
  SamplingParams s;
  s.temperature = 0.7f;
  s.top_k = 5;
  s.top_p = 0.9f;
  s.min_p = 0.05f;
  s.repetition_penalty = 1.2f;
  s.presence_penalty = -0.5f;
  s.frequency_penalty = 0.25f;
  s.seed = 99;
  s.logprobs = 3;
  return s;
}

void ExpectSameSampling(const SamplingParams& got, const SamplingParams& want) {
  EXPECT_EQ(got.temperature, want.temperature);
  EXPECT_EQ(got.top_k, want.top_k);
  EXPECT_EQ(got.top_p, want.top_p);
  EXPECT_EQ(got.min_p, want.min_p);
  EXPECT_EQ(got.repetition_penalty, want.repetition_penalty);
  EXPECT_EQ(got.presence_penalty, want.presence_penalty);
  EXPECT_EQ(got.frequency_penalty, want.frequency_penalty);
  EXPECT_EQ(got.seed, want.seed);
  EXPECT_EQ(got.logprobs, want.logprobs);
}

TEST(StepConvertTest, APlanSurvivesTheWireFieldForField) {
  StepPlan plan;
  plan.finished = {3, 5};
  plan.preempted = {5};
  plan.new_sequences.push_back(NewSequencePlan{.seq_id = 7,
                                               .prompt = {11, 12, 13, 14, 15, 16, 17},
                                               .output = {18, 19},
                                               .token_ids = {15, 16, 17, 18, 19},
                                               .num_computed_tokens = 4,
                                               .block_ids = {8, 2, 6},
                                               .sampling = Seeded(),
                                               .sample = true,
                                               .speculate = true,
                                               .num_proposals = 3});
  plan.new_sequences.push_back(NewSequencePlan{.seq_id = 9, .prompt = {1}, .output = {}, .token_ids = {1},
                                               .num_computed_tokens = 0, .block_ids = {4},
                                               .sampling = SamplingParams{}, .sample = true});
  plan.continuing.push_back(ContinuingSequencePlan{.seq_id = 1, .new_block_ids = {5},
                                                   .replaced_blocks = {{.index = 1, .block_id = 31}},
                                                   .token_ids = {4, 5}, .sample = false});
  plan.block_copies = {{.src = 12, .dst = 31}, {.src = 12, .dst = 33}};
  plan.continuing.push_back(ContinuingSequencePlan{.seq_id = 2, .new_block_ids = {}, .sample = true,
                                                   .decode_sampled = true, .num_draft_slots = 4,
                                                   .num_proposals = 2});
  plan.order = {7, 1, 9, 2};

  const iv1::Step proto = StepPlanToProto(plan, 42);
  EXPECT_EQ(proto.step_id(), 42u);
  EXPECT_FALSE(proto.new_sequences(1).sampling().has_seed()) << "an unseeded request stays unseeded";
  absl::StatusOr<StepPlan> back = StepPlanFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->finished, plan.finished);
  EXPECT_EQ(back->preempted, plan.preempted);
  EXPECT_EQ(back->order, plan.order);
  ASSERT_EQ(back->new_sequences.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const NewSequencePlan& got = back->new_sequences[i];
    const NewSequencePlan& want = plan.new_sequences[i];
    EXPECT_EQ(got.seq_id, want.seq_id);
    EXPECT_EQ(got.prompt, want.prompt);
    EXPECT_EQ(got.output, want.output);
    EXPECT_EQ(got.token_ids, want.token_ids);
    EXPECT_EQ(got.num_computed_tokens, want.num_computed_tokens);
    EXPECT_EQ(got.block_ids, want.block_ids);
    EXPECT_EQ(got.sample, want.sample);
    EXPECT_EQ(got.speculate, want.speculate);
    EXPECT_EQ(got.num_proposals, want.num_proposals);
    ExpectSameSampling(got.sampling, want.sampling);
  }
  ASSERT_EQ(back->continuing.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back->continuing[i].seq_id, plan.continuing[i].seq_id);
    EXPECT_EQ(back->continuing[i].new_block_ids, plan.continuing[i].new_block_ids);
    EXPECT_EQ(back->continuing[i].token_ids, plan.continuing[i].token_ids);
    EXPECT_EQ(back->continuing[i].sample, plan.continuing[i].sample);
    EXPECT_EQ(back->continuing[i].decode_sampled, plan.continuing[i].decode_sampled);
    EXPECT_EQ(back->continuing[i].num_draft_slots, plan.continuing[i].num_draft_slots);
    EXPECT_EQ(back->continuing[i].num_proposals, plan.continuing[i].num_proposals);
    ASSERT_EQ(back->continuing[i].replaced_blocks.size(), plan.continuing[i].replaced_blocks.size());
    for (size_t r = 0; r < plan.continuing[i].replaced_blocks.size(); ++r) {
      EXPECT_EQ(back->continuing[i].replaced_blocks[r].index, plan.continuing[i].replaced_blocks[r].index);
      EXPECT_EQ(back->continuing[i].replaced_blocks[r].block_id, plan.continuing[i].replaced_blocks[r].block_id);
    }
  }
  ASSERT_EQ(back->block_copies.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back->block_copies[i].src, plan.block_copies[i].src);
    EXPECT_EQ(back->block_copies[i].dst, plan.block_copies[i].dst);
  }
}

// Token-level controls travel as the coordinator sorted them; the worker
// sorts again what another sender might not have.
TEST(StepConvertTest, TokenControlsSurviveTheWire) {
  SamplingParams s = Seeded();
  auto c = std::make_shared<TokenControls>();
  c->logit_bias = {{2, -100.0f}, {9, 0.5f}};
  c->allowed_token_ids = {1, 2, 9, 40};
  c->bad_words = {{7}, {3, 4, 5}};
  s.controls = c;
  const iv1::SamplingParams proto = SamplingToProto(s);
  const SamplingParams got = SamplingFromProto(proto);
  ExpectSameSampling(got, s);
  ASSERT_NE(got.controls, nullptr);
  EXPECT_EQ(*got.controls, *c);
  EXPECT_EQ(SamplingFromProto(SamplingToProto(Seeded())).controls, nullptr);
  iv1::SamplingParams unsorted;
  unsorted.add_allowed_token_ids(9);
  unsorted.add_allowed_token_ids(1);
  unsorted.add_allowed_token_ids(9);
  EXPECT_EQ(SamplingFromProto(unsorted).controls->allowed_token_ids, (std::vector<int32_t>{1, 9}));
}

TEST(StepConvertTest, ANewSequenceWithoutSamplingIsRefusedByName) {
  iv1::Step step;
  step.set_step_id(6);
  step.add_new_sequences()->set_seq_id(12);
  const absl::Status s = StepPlanFromProto(step).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sequence 12"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("NewSequence.sampling"), absl::string_view::npos) << s;
}

TEST(StepConvertTest, SampledTokensSurviveTheWire) {
  const std::vector<StepToken> tokens = {
      {.seq_id = 4, .sampled = {.token = 17, .logprob = -0.25f, .top = {{17, -0.25f}, {3, -2.5f}}}, .logits = {},
       .num_proposed = 3},
      {.seq_id = 2, .sampled = {.token = 0, .logprob = 0, .top = {}}, .logits = {}}};
  iv1::StepResult result;
  AppendTokens(tokens, result);
  const std::vector<StepToken> back = TokensFromProto(result);
  ASSERT_EQ(back.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(back[i].seq_id, tokens[i].seq_id);
    EXPECT_EQ(back[i].sampled.token, tokens[i].sampled.token);
    EXPECT_EQ(back[i].sampled.logprob, tokens[i].sampled.logprob);
    EXPECT_EQ(back[i].sampled.top, tokens[i].sampled.top);
    EXPECT_EQ(back[i].num_proposed, tokens[i].num_proposed);
  }
}

// Prompt log-probs (and SamplingParams.prompt_logprobs) survive the wire;
// arrays of different lengths are refused, naming the sequence.
TEST(StepConvertTest, PromptLogprobsSurviveTheWire) {
  SamplingParams with;
  with.prompt_logprobs = 2;
  EXPECT_EQ(SamplingFromProto(SamplingToProto(with)).prompt_logprobs, 2);
  EXPECT_EQ(SamplingFromProto(SamplingToProto(SamplingParams())).prompt_logprobs, -1);
  ScoredToken a{.scored = {.token = 5, .logprob = -1.25f, .top = {{9, -0.5f}, {5, -1.25f}}}, .rank = 2};
  ScoredToken b{.scored = {.token = 9, .logprob = -0.75f, .top = {{9, -0.75f}, {1, -3.0f}}}, .rank = 1};
  const std::vector<PromptLogprobs> prompts = {{.seq_id = 7, .first_position = 3, .tokens = {a, b}}};
  iv1::StepResult result;
  AppendPromptLogprobs(prompts, result);
  absl::StatusOr<std::vector<PromptLogprobs>> back = PromptLogprobsFromProto(result);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].seq_id, 7u);
  EXPECT_EQ((*back)[0].first_position, 3);
  ASSERT_EQ((*back)[0].tokens.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const ScoredToken& got = (*back)[0].tokens[i];
    const ScoredToken& want = prompts[0].tokens[i];
    EXPECT_EQ(got.scored.token, want.scored.token);
    EXPECT_EQ(got.scored.logprob, want.scored.logprob);
    EXPECT_EQ(got.scored.top, want.scored.top);
    EXPECT_EQ(got.rank, want.rank);
  }
  result.mutable_prompt_logprobs(0)->add_ranks(3);
  const absl::Status bad = PromptLogprobsFromProto(result).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_NE(bad.message().find("sequence 7"), absl::string_view::npos) << bad;
}

}  // namespace
}  // namespace tpserve
