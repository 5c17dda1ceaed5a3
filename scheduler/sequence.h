// A request's sequence as the scheduler tracks it: its tokens, how many of them
// have K/V in the cache, its block table, and what the workers already know.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "scheduler/block_manager.h"

namespace tpserve {

enum class SequenceStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;      // [num_prompt_tokens + outputs] prompt, then generated tokens
  int64_t num_prompt_tokens = 0;
  // Leading tokens whose K/V is in the cache or computed by a step already
  // scheduled (Scheduler::Schedule advances it; a step's result commits it).
  int64_t num_computed_tokens = 0;
  // Tokens sampled by steps in flight and not in `tokens` yet (0 or 1): with
  // one step in flight ahead, the next step is scheduled before they arrive
  // and computes such a token as a decode the workers feed themselves.
  int32_t num_pending_tokens = 0;
  // Speculative decoding: the draft slots of the steps in flight that sample
  // it (each may keep up to that many tokens more), and the tokens those steps
  // compute at most (1 + slots a decode with slots): num_computed_tokens is
  // the worst case (every slot kept) until their results say otherwise, and
  // less these, the positions known computed.
  int32_t num_pending_slots = 0;
  int64_t num_inflight_tokens = 0;
  int64_t num_cached_tokens = 0;    // prompt tokens served by the prefix cache at first admission
  std::vector<BlockId> block_table; // token p lives in block_table[p / block_size]
  BlockHashChain hash_chain;        // its full blocks' hashes (the prompt's from the request), how many registered
  SequenceStatus status = SequenceStatus::kWaiting;
  int32_t num_preemptions = 0;
  bool admitted_before = false;     // num_cached_tokens is set at the first admission only
  uint64_t group = 0;               // who asked for it (a client): admission is fair between groups
  // False for a sequence that needs the logits of every prompt position
  // (prompt log-probs): it computes its whole prompt, as vLLM does, and
  // registers its blocks in the prefix cache like any other.
  bool read_prefix_cache = true;
  // Parallel sampling (a request's n > 1 choices; Scheduler::Add's forks):
  // the sequences waiting to start from this one's prompt blocks once it has
  // scheduled its whole prompt, and, on such a sequence, the one it waits for.
  std::vector<Sequence*> forks;
  Sequence* fork_of = nullptr;

  // What the workers hold: nothing until the sequence is first scheduled (and
  // again after a preemption); then the first `blocks_on_workers` entries of
  // the block table.
  bool on_workers = false;
  size_t blocks_on_workers = 0;
  // The workers' table is longer than blocks_on_workers: blocks a step's
  // slots held and its result did not need were freed (OnStepDone); the next
  // plan tells the workers to cut theirs (ContinuingSequencePlan::keep_blocks).
  bool workers_table_longer = false;
  // Its last step sampled a token, which the workers hold: the next step
  // computes that token (StepPlan's decode_sampled).
  bool workers_hold_next_input = false;
  // Speculative decoding: the proposals rank 0 was asked to make when the
  // last step planned for it samples it; its next step has at most this many
  // draft slots (Scheduler's Drafter). 0 after a preemption.
  int32_t proposals_asked = 0;

  // Tokens known or pending: the length once every step in flight is back,
  // at most (a step with draft slots may keep fewer than all of them).
  int64_t length() const {
    return static_cast<int64_t>(tokens.size()) + num_pending_tokens + num_pending_slots;
  }
  // Positions whose K/V the results so far say are computed.
  int64_t num_known_computed() const { return num_computed_tokens - num_inflight_tokens; }

  int64_t num_output_tokens() const {
    return static_cast<int64_t>(tokens.size()) - num_prompt_tokens;
  }
  std::span<const int32_t> output_tokens() const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(num_prompt_tokens));
  }
};

}  // namespace tpserve
