// Prompt log-probs on the workers (SamplingParams::prompt_logprobs;
// docs/architecture.md, "Prompt log-probs").
//
// The final hidden state of position p gives the distribution of the token at
// p + 1. So a prefill chunk computing positions [c, c + m) of a prompt of
// length L scores prompt positions [c + 1, min(c + m + 1, L)): the row of
// position L - 1 is the one the first output token is sampled from, and
// position 0 has no log-prob (nothing precedes it).
//
//   prompt:        t0  t1  t2  t3  t4        (L = 5, chunks [0, 3) and [3, 5))
//   chunk 1 rows:  p0  p1  p2                scores t1 t2 t3
//   chunk 2 rows:              p3  p4        scores t4 (p4's row is sampled from)
//
// After a step's forward and sampling, every rank runs the LM head over those
// rows in passes of at most Model::max_logits_rows() rows (the head's own
// workspace, which the step's logits used: memory does not grow with the
// prompt or the chunk; Model::TokenLogits), and rank 0 reduces each pass's
// [n, V] logits to the prompt token's log-prob, its rank and the top k
// (ScoreToken, log-softmax in double as the sampler's log-probs) before the
// next pass. Only those reach the coordinator, never a vocabulary row.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/step_plan.h"
#include "worker/model.h"

namespace tpserve {

// One sequence's rows of the current step to score.
struct PromptRows {
  uint64_t seq_id = 0;
  int64_t first_row = 0;             // the step's new-token row of position first_position - 1
  int64_t first_position = 0;        // >= 1: the first prompt position scored
  std::span<const int32_t> targets;  // [n] the prompt tokens at first_position, +1, ... (n rows)
  int32_t top_n = 0;                 // alternatives per position (SamplingParams::prompt_logprobs)
};

// The rows of a chunk computing positions [start, start + num_tokens) of a
// sequence whose prompt is `prompt`, starting at the step's row `step_row`
// (num_tokens 0 / an empty result when the chunk scores nothing).
PromptRows RowsOfChunk(uint64_t seq_id, std::span<const int32_t> prompt, int64_t start, int64_t num_tokens,
                       int64_t step_row, int32_t top_n);

// Scores `rows` after the step's forward (every rank calls it with the same
// rows: the LM head's gather is a collective). Rank 0 gets one PromptLogprobs
// per non-empty entry, in order; other ranks an empty vector. A failed
// collective as it came.
absl::StatusOr<std::vector<PromptLogprobs>> ScorePromptRows(Model& model, std::span<const PromptRows> rows);

}  // namespace tpserve
