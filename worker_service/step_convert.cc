#include "worker_service/step_convert.h"

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace iv1 = tpserve::internal::v1;

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

absl::StatusOr<StepPlan> StepPlanFromProto(const iv1::Step& step) {
  StepPlan plan;
  plan.finished.assign(step.finished().begin(), step.finished().end());
  plan.order.assign(step.order().begin(), step.order().end());
  plan.new_sequences.reserve(static_cast<size_t>(step.new_sequences_size()));
  for (const iv1::NewSequence& s : step.new_sequences()) {
    NewSequencePlan n;
    n.seq_id = s.seq_id();
    n.prompt.assign(s.prompt_token_ids().begin(), s.prompt_token_ids().end());
    n.output.assign(s.output_token_ids().begin(), s.output_token_ids().end());
    n.token_ids.assign(s.token_ids().begin(), s.token_ids().end());
    n.num_computed_tokens = s.num_computed_tokens();
    n.block_ids.assign(s.block_ids().begin(), s.block_ids().end());
    if (!s.has_sampling()) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id(), ": new sequence ", s.seq_id(),
                                                     " has no sampling parameters; set NewSequence.sampling"));
    }
    n.sampling = SamplingFromProto(s.sampling());
    n.sample = s.sample();
    plan.new_sequences.push_back(std::move(n));
  }
  plan.continuing.reserve(static_cast<size_t>(step.continuing_size()));
  for (const iv1::ContinuingSequence& s : step.continuing()) {
    ContinuingSequencePlan c;
    c.seq_id = s.seq_id();
    c.new_block_ids.assign(s.new_block_ids().begin(), s.new_block_ids().end());
    c.token_ids.assign(s.token_ids().begin(), s.token_ids().end());
    c.sample = s.sample();
    plan.continuing.push_back(std::move(c));
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

}  // namespace tpserve
