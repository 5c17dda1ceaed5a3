#include "proto/step_convert.h"

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace iv1 = tpserve::internal::v1;

iv1::SamplingParams SamplingToProto(const SamplingParams& s) {
  iv1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_k(s.top_k);
  p.set_top_p(s.top_p);
  p.set_min_p(s.min_p);
  p.set_repetition_penalty(s.repetition_penalty);
  p.set_presence_penalty(s.presence_penalty);
  p.set_frequency_penalty(s.frequency_penalty);
  p.set_has_seed(s.seed.has_value());
  p.set_seed(s.seed.value_or(0));
  p.set_logprobs(s.logprobs);
  return p;
}

SamplingParams SamplingFromProto(const iv1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  if (p.has_seed()) s.seed = p.seed();
  s.logprobs = p.logprobs();
  return s;
}

iv1::Step StepPlanToProto(const StepPlan& plan, uint64_t step_id) {
  iv1::Step out;
  out.set_step_id(step_id);
  out.mutable_finished()->Add(plan.finished.begin(), plan.finished.end());
  for (const NewSequencePlan& s : plan.new_sequences) {
    iv1::NewSequence* n = out.add_new_sequences();
    n->set_seq_id(s.seq_id);
    n->mutable_prompt_token_ids()->Add(s.prompt.begin(), s.prompt.end());
    n->mutable_output_token_ids()->Add(s.output.begin(), s.output.end());
    n->mutable_token_ids()->Add(s.token_ids.begin(), s.token_ids.end());
    n->set_num_computed_tokens(static_cast<uint32_t>(s.num_computed_tokens));
    n->mutable_block_ids()->Add(s.block_ids.begin(), s.block_ids.end());
    *n->mutable_sampling() = SamplingToProto(s.sampling);
    n->set_sample(s.sample);
  }
  for (const ContinuingSequencePlan& s : plan.continuing) {
    iv1::ContinuingSequence* c = out.add_continuing();
    c->set_seq_id(s.seq_id);
    c->mutable_new_block_ids()->Add(s.new_block_ids.begin(), s.new_block_ids.end());
    c->mutable_token_ids()->Add(s.token_ids.begin(), s.token_ids.end());
    c->set_sample(s.sample);
    c->set_decode_sampled(s.decode_sampled);
  }
  out.mutable_order()->Add(plan.order.begin(), plan.order.end());
  return out;
}

absl::StatusOr<StepPlan> StepPlanFromProto(const iv1::Step& step) {
  StepPlan plan;
  plan.finished.assign(step.finished().begin(), step.finished().end());
  plan.order.assign(step.order().begin(), step.order().end());
  plan.new_sequences.reserve(static_cast<size_t>(step.new_sequences_size()));
  for (const iv1::NewSequence& s : step.new_sequences()) {
    if (!s.has_sampling()) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id(), ": new sequence ", s.seq_id(),
                                                     " has no sampling parameters; set NewSequence.sampling"));
    }
    plan.new_sequences.push_back(NewSequencePlan{
        .seq_id = s.seq_id(),
        .prompt = {s.prompt_token_ids().begin(), s.prompt_token_ids().end()},
        .output = {s.output_token_ids().begin(), s.output_token_ids().end()},
        .token_ids = {s.token_ids().begin(), s.token_ids().end()},
        .num_computed_tokens = s.num_computed_tokens(),
        .block_ids = {s.block_ids().begin(), s.block_ids().end()},
        .sampling = SamplingFromProto(s.sampling()),
        .sample = s.sample(),
    });
  }
  plan.continuing.reserve(static_cast<size_t>(step.continuing_size()));
  for (const iv1::ContinuingSequence& s : step.continuing()) {
    plan.continuing.push_back(ContinuingSequencePlan{
        .seq_id = s.seq_id(),
        .new_block_ids = {s.new_block_ids().begin(), s.new_block_ids().end()},
        .token_ids = {s.token_ids().begin(), s.token_ids().end()},
        .sample = s.sample(),
        .decode_sampled = s.decode_sampled(),
    });
  }
  return plan;
}

void AppendTokens(std::span<const StepToken> tokens, iv1::StepResult& result) {
  for (const StepToken& t : tokens) {
    iv1::SampledToken* out = result.add_tokens();
    out->set_seq_id(t.seq_id);
    out->set_token_id(t.sampled.token);
    out->set_logprob(t.sampled.logprob);
    for (const auto& [id, logprob] : t.sampled.top) {
      out->add_top_ids(id);
      out->add_top_logprobs(logprob);
    }
  }
}

std::vector<StepToken> TokensFromProto(const iv1::StepResult& result) {
  std::vector<StepToken> tokens;
  tokens.reserve(static_cast<size_t>(result.tokens_size()));
  for (const iv1::SampledToken& t : result.tokens()) {
    StepToken token{.seq_id = t.seq_id(), .sampled = {.token = t.token_id(), .logprob = t.logprob(), .top = {}}};
    for (int k = 0; k < t.top_ids_size() && k < t.top_logprobs_size(); ++k) {
      token.sampled.top.emplace_back(t.top_ids(k), t.top_logprobs(k));
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace tpserve
