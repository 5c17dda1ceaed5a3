#include "scheduler/step_plan.h"

#include "absl/container/flat_hash_map.h"

namespace tpserve {

SamplingParams ChoiceSampling(SamplingParams sampling, int32_t index) {
  if (sampling.seed) *sampling.seed += static_cast<uint64_t>(index);
  return sampling;
}

StepPlan BuildStepPlan(const ScheduledStep& step, const SamplingLookup& sampling) {
  StepPlan plan;
  plan.finished = step.dropped;
  plan.preempted = step.preempted;
  for (const ScheduledSequence& s : step.sequences) {
    const Sequence& seq = *s.seq;
    // The tokens to compute; none for decode_sampled (the workers hold it, and
    // the coordinator may not have it yet).
    std::vector<int32_t> compute;
    if (!s.decode_sampled) {
      const auto begin = seq.tokens.begin() + s.start;
      compute.assign(begin, begin + (s.num_tokens - s.draft_slots));
    }
    const auto prompt_end = seq.tokens.begin() + seq.num_prompt_tokens;
    // Blocks the workers knew before the step; a copy beyond them is a new block.
    const int64_t known = std::ssize(seq.block_table) - std::ssize(s.new_blocks);
    std::vector<BlockReplacement> replaced;
    for (const BlockCopy& c : s.copies) {
      plan.block_copies.push_back(BlockCopyPlan{.src = c.src, .dst = c.dst});
      if (!s.is_new && c.index < known) replaced.push_back(BlockReplacement{.index = c.index, .block_id = c.dst});
    }
    if (s.is_new) {
      plan.new_sequences.push_back(NewSequencePlan{
          .seq_id = seq.id,
          .prompt = std::vector<int32_t>(seq.tokens.begin(), prompt_end),
          .output = std::vector<int32_t>(prompt_end, seq.tokens.end()),
          .token_ids = std::move(compute),
          .num_computed_tokens = s.start,
          .block_ids = s.new_blocks,
          .sampling = sampling(seq.id),
          .sample = s.sample,
          .speculate = s.speculate,
          .num_proposals = s.num_proposals,
      });
    } else {
      plan.continuing.push_back(ContinuingSequencePlan{
          .seq_id = seq.id,
          .keep_blocks = s.keep_blocks,
          .new_block_ids = s.new_blocks,
          .replaced_blocks = std::move(replaced),
          .token_ids = std::move(compute),
          .sample = s.sample,
          .decode_sampled = s.decode_sampled,
          .num_draft_slots = s.draft_slots,
          .num_proposals = s.num_proposals,
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
    const auto it = by_seq.find(s.id);
    ordered.push_back(it == by_seq.end() ? nullptr : it->second);
  }
  return ordered;
}

std::vector<std::span<const StepToken>> TokenRunsInStepOrder(const ScheduledStep& step,
                                                             std::span<const StepToken> tokens) {
  absl::flat_hash_map<uint64_t, std::pair<size_t, size_t>> runs;  // seq -> [begin, end) in tokens
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [it, added] = runs.try_emplace(tokens[i].seq_id, i, i + 1);
    if (!added && it->second.second == i) it->second.second = i + 1;
  }
  std::vector<std::span<const StepToken>> ordered;
  for (const ScheduledSequence& s : step.sequences) {
    if (!s.sample) continue;
    const auto it = runs.find(s.id);
    ordered.push_back(it == runs.end() ? std::span<const StepToken>()
                                       : tokens.subspan(it->second.first, it->second.second - it->second.first));
  }
  return ordered;
}

}  // namespace tpserve
