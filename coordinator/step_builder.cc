#include "coordinator/step_builder.h"

namespace tpserve {

namespace iv1 = tpserve::internal::v1;

iv1::Step BuildStep(const ScheduledStep& step, uint64_t step_id, const SamplingLookup& sampling) {
  iv1::Step out;
  out.set_step_id(step_id);
  for (uint64_t id : step.dropped) out.add_finished(id);
  for (const ScheduledSequence& s : step.sequences) {
    const Sequence& seq = *s.seq;
    const auto begin = seq.tokens.begin() + seq.num_computed_tokens;
    const auto end = begin + s.num_tokens;
    if (s.is_new) {
      iv1::NewSequence* n = out.add_new_sequences();
      n->set_seq_id(seq.id);
      n->mutable_prompt_token_ids()->Add(seq.tokens.begin(), seq.tokens.begin() + seq.num_prompt_tokens);
      n->mutable_output_token_ids()->Add(seq.tokens.begin() + seq.num_prompt_tokens, seq.tokens.end());
      n->mutable_token_ids()->Add(begin, end);
      n->set_num_computed_tokens(static_cast<uint32_t>(seq.num_computed_tokens));
      n->mutable_block_ids()->Add(s.new_blocks.begin(), s.new_blocks.end());
      *n->mutable_sampling() = sampling(seq.id);
      n->set_sample(s.sample);
    } else {
      iv1::ContinuingSequence* c = out.add_continuing();
      c->set_seq_id(seq.id);
      c->mutable_new_block_ids()->Add(s.new_blocks.begin(), s.new_blocks.end());
      c->mutable_token_ids()->Add(begin, end);
      c->set_sample(s.sample);
    }
    out.add_order(seq.id);
  }
  return out;
}

}  // namespace tpserve
