#include "scheduler/step_plan.h"

#include "absl/container/flat_hash_map.h"

namespace tpserve {

StepPlan BuildStepPlan(const ScheduledStep& step, const SamplingLookup& sampling) {
  StepPlan plan;
  plan.finished = step.dropped;
  for (const ScheduledSequence& s : step.sequences) {
    const Sequence& seq = *s.seq;
    const auto begin = seq.tokens.begin() + seq.num_computed_tokens;
    const auto end = begin + s.num_tokens;
    const auto prompt_end = seq.tokens.begin() + seq.num_prompt_tokens;
    if (s.is_new) {
      plan.new_sequences.push_back(NewSequencePlan{
          .seq_id = seq.id,
          .prompt = std::vector<int32_t>(seq.tokens.begin(), prompt_end),
          .output = std::vector<int32_t>(prompt_end, seq.tokens.end()),
          .token_ids = std::vector<int32_t>(begin, end),
          .num_computed_tokens = seq.num_computed_tokens,
          .block_ids = s.new_blocks,
          .sampling = sampling(seq.id),
          .sample = s.sample,
      });
    } else {
      plan.continuing.push_back(ContinuingSequencePlan{
          .seq_id = seq.id,
          .new_block_ids = s.new_blocks,
          .token_ids = std::vector<int32_t>(begin, end),
          .sample = s.sample,
      });
    }
    plan.order.push_back(seq.id);
  }
  return plan;
}

std::vector<const StepToken*> TokensInStepOrder(const ScheduledStep& step, std::span<const StepToken> tokens) {
  absl::flat_hash_map<uint64_t, const StepToken*> by_seq;
  for (const StepToken& t : tokens) by_seq[t.seq_id] = &t;
  std::vector<const StepToken*> ordered;
  for (const ScheduledSequence& s : step.sequences) {
    if (!s.sample) continue;
    const auto it = by_seq.find(s.seq->id);
    ordered.push_back(it == by_seq.end() ? nullptr : it->second);
  }
  return ordered;
}

}  // namespace tpserve
