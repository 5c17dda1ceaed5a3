// GenerateGreedy: one sequence's greedy generation on one rank, with or
// without speculative decoding, straight over Model::Forward (no scheduler,
// no step runner). The reference the engine's speculative path (issue 27: not
// built yet) is to be held to, and the loop of bench/spec_decode_bench's end
// to end rows:
//
//   step 0:   the prompt in one prefill step; its logits give the first token
//   without a proposer: one step per token (the last one, at the next position)
//   with one: the last token and up to k proposed ones, k + 1 logits rows
//             (backend/step.h); AcceptGreedy keeps the longest prefix equal to
//             the target's argmax, and the target's next token after it; the
//             proposer learns the tokens kept
//
// A rejected token's K/V stays in its slot unread: the next step's seq_len
// ends before it, or the step writes the slot anew. On the CPU backend the
// output is the same token for token with a proposer or without (each row has
// the bits of the one-token step: "The CPU backend's numerics").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "speculative/policy.h"
#include "speculative/proposer.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve {

struct GreedyOptions {
  int32_t max_tokens = 16;             // tokens generated, >= 1
  int32_t num_speculative_tokens = 4;  // k: most proposed tokens checked per step, >= 1
  // With c(k) for k = 0.. (the batch-1 costs, cost[0] = 1), a
  // SpeculationPolicy with `policy` chooses each step's k (its
  // max_speculative_tokens is num_speculative_tokens); empty: always up to k.
  std::span<const double> policy_cost;
  speculative::PolicyOptions policy;
};

struct GreedyResult {
  std::vector<int32_t> tokens;        // [max_tokens] generated
  int64_t steps = 0;                  // forward steps after the prompt's
  int64_t proposed = 0;               // tokens proposed in all
  int64_t accepted = 0;               // of them accepted
  std::vector<int64_t> accepted_at;   // [k] steps that accepted proposed token i (vLLM's per-position count)
  std::vector<int64_t> steps_by_proposed;  // [k + 1] steps that proposed n tokens
  double prompt_seconds = 0;          // the prompt's step
  double decode_seconds = 0;          // the steps after it, proposing included
};

// Generates options.max_tokens tokens after `prompt` (>= 1 token) for a
// sequence stored through `block_table` (block ids of `cache`, enough for
// prompt + max_tokens + k positions), greedy (argmax, ties to the lowest id,
// as sampling/sampler.h). `proposer` may be null (no speculation); it is
// given the prompt, then each generated token. INVALID_ARGUMENT for options
// or a table that do not fit; a failed forward as it came.
absl::StatusOr<GreedyResult> GenerateGreedy(Model& model, KvCache& cache, std::span<const int32_t> prompt,
                                            std::span<const int32_t> block_table, const GreedyOptions& options,
                                            speculative::Proposer* proposer);

}  // namespace tpserve
