// The step protocol without its wire format: what the scheduler decides for
// one step (StepPlan) and what rank 0 answers (StepToken). The coordinator
// sends it as worker.proto's Step (proto/step_convert.h); the offline engine
// hands it to its StepRunner directly. Every rank applies the same plan to
// its own per-sequence state (worker/step_runner.h). BuildStepPlan turns a
// ScheduledStep into the plan; the same function serves both.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "scheduler/scheduler.h"

namespace tpserve {

// A sequence the workers have not seen (worker.proto NewSequence).
struct NewSequencePlan {
  uint64_t seq_id = 0;
  std::vector<int32_t> prompt;     // the prompt (repetition penalty)
  std::vector<int32_t> output;     // tokens generated before a preemption (penalties;
                                   // the seeded RNG is advanced past them)
  std::vector<int32_t> token_ids;  // to compute now: (prompt + output)[num_computed, +n)
  int64_t num_computed_tokens = 0; // already in the KV cache (cached prefix)
  std::vector<int32_t> block_ids;  // its block table so far
  SamplingParams sampling;
  bool sample = false;             // false for a non-final prefill chunk
  // Speculative decoding: rank 0 holds a proposer for it (fed prompt, output
  // and every token sampled for it), and after this step samples it proposes
  // up to num_proposals tokens for its next step (worker.proto NewSequence).
  bool speculate = false;
  int32_t num_proposals = 0;
};

// Copy-on-write (BlockManager::PrepareWrite): every layer's K and V of block
// `src` copied to block `dst`, on the workers' devices, before the forward.
struct BlockCopyPlan {
  int32_t src = -1;
  int32_t dst = -1;
};

// Entry `index` of a known sequence's block table becomes `block_id` (the
// copy it writes instead of a shared block).
struct BlockReplacement {
  int64_t index = 0;
  int32_t block_id = -1;
};

// A sequence the workers know: what changed since its last step.
struct ContinuingSequencePlan {
  uint64_t seq_id = 0;
  // >= 0: its block table is cut to this many entries first (blocks a step's
  // draft slots held and its result did not need, freed by the coordinator
  // once no step in flight could write them); -1: kept as it is.
  int64_t keep_blocks = -1;
  std::vector<int32_t> new_block_ids;  // appended to its block table
  std::vector<BlockReplacement> replaced_blocks;  // entries of its table that are now copies
  std::vector<int32_t> token_ids;      // the next prefill chunk (empty with decode_sampled)
  bool sample = false;
  // Compute the one token sampled for it in its previous step: every rank
  // holds that token (rank 0 broadcasts what it samples), so the plan does
  // not carry it and may be built before the token is known.
  bool decode_sampled = false;
  // Speculative decoding (with decode_sampled only): up to this many of the
  // proposals rank 0 made when its previous step sampled it are computed
  // after its input, with a logits row each (its blocks hold 1 + slots
  // positions). Rank 0 samples row by row and keeps a proposed token while it
  // equals the token sampled before it; the step yields 1 to p + 1 tokens for
  // the sequence (p <= slots proposals used: StepToken::num_proposed),
  // consecutive in the result, and every rank keeps only the accepted
  // positions computed; the blocks past them stay in its table until a plan's
  // keep_blocks cuts it (a later step may already have been planned on them).
  int32_t num_draft_slots = 0;
  int32_t num_proposals = 0;  // as NewSequencePlan::num_proposals
};

struct StepPlan {
  std::vector<uint64_t> finished;  // dropped first; unknown ids are ignored
  std::vector<uint64_t> preempted;  // those of `finished` that come back (rank 0's suffix cache skips their output)
  std::vector<BlockCopyPlan> block_copies;  // then these copies, in order, before the forward
  std::vector<NewSequencePlan> new_sequences;
  std::vector<ContinuingSequencePlan> continuing;
  std::vector<uint64_t> order;  // every scheduled id once, multi-token sequences first
};

struct StepToken {
  uint64_t seq_id = 0;
  SampledToken sampled;  // token, and log-probs when the sequence asked for them
  std::vector<float> logits;  // [V] the row it was sampled from, with StepRunnerOptions::keep_logits
  // The first token of a sequence that verified proposals: how many (the
  // run's other tokens are the accepted ones and the token after them).
  int32_t num_proposed = 0;
  // Non-empty: rank 0 gave up on this sequence's grammar (its mask passed a
  // limit); `sampled` was drawn without the mask and is not output: the
  // coordinator ends the sequence with this message.
  std::string error;
};

// The prompt log-probs (SamplingParams::prompt_logprobs) one step computed
// for one sequence: prompt positions [first_position, first_position + n),
// each the log-prob of the prompt token there given the tokens before it,
// from the logits of the position before (so first_position >= 1: the
// prompt's first token has none). A prefill chunk of positions [c, c + m)
// scores positions [c + 1, min(c + m + 1, prompt length)). Rank 0 only.
struct PromptLogprobs {
  uint64_t seq_id = 0;
  int64_t first_position = 0;
  std::vector<ScoredToken> tokens;  // [n] the prompt token, its log-prob and rank, the top prompt_logprobs
};

// The sampling parameters of choice `index` of a request (parallel sampling,
// n > 1): the request's, with seed + index (mod 2^64) when it has a seed, so
// choice i of a seeded request gives the tokens a request of its own with
// seed + i gives. Unseeded choices each get a fresh seed on the worker.
SamplingParams ChoiceSampling(SamplingParams sampling, int32_t index);

// The sampling parameters of a sequence, by id (asked only for new sequences;
// must exist for each of them).
using SamplingLookup = std::function<const SamplingParams&(uint64_t seq_id)>;

// The plan of one scheduled step: sequences the workers do not know yet go
// out whole (prompt, output so far, tokens to compute, block table,
// sampling), known ones as diffs (new blocks, and the tokens to compute: the
// next prefill chunk, or decode_sampled for the token sampled in its previous
// step, which the plan does not carry). `finished` lists the sequences
// dropped since the last step; `block_copies` the copy-on-writes of the
// step's sequences (a new sequence's block table has its copies already, a
// known one gets them as replaced_blocks); `order` lists every scheduled sequence as
// scheduled (prefills first). Call right after Scheduler::Schedule, while
// the step's Sequence pointers are valid.
StepPlan BuildStepPlan(const ScheduledStep& step, const SamplingLookup& sampling);

// Rank 0's answer to a step matched to what it had to sample: one entry per
// sequence of `step` with sample = true, in step order, pointing into
// `tokens`; nullptr where `tokens` has none for it (a rank that does not
// sample, or a rank 0 that failed to).
std::vector<const StepToken*> TokensInStepOrder(const ScheduledStep& step, std::span<const StepToken> tokens);

// The same with every token of each sampled sequence: a sequence that
// verified drafts has several, consecutive in `tokens` (an empty span where
// `tokens` has none for it).
std::vector<std::span<const StepToken>> TokenRunsInStepOrder(const ScheduledStep& step,
                                                             std::span<const StepToken> tokens);

}  // namespace tpserve
