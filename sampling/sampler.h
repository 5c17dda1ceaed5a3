// Sampling on rank 0: from the gathered host logits of the last token of each
// sequence to the next token ids (and log-probs when asked).
//
// Per row, in vLLM's order:
//   0. token-level controls (sampling/token_controls.h): only the allowed
//      tokens are candidates (gathered, not masked: the row shrinks to them),
//      bad words' banned tokens become -inf, logit_bias is added;
//   1. penalties on the raw logits x (counts from this sequence's history):
//        repetition r, over tokens seen in the prompt OR the output:
//                      x > 0 ? x / r : x · r
//        frequency f:  x -= f · count_in_output(token)
//        presence p:   x -= p · (count_in_output(token) > 0)
//   2. greedy when temperature < kGreedyTemperature: argmax, ties to the lowest id;
//      otherwise x /= temperature and
//   3. filters on softmax(x): min-p (keep prob ≥ min_p · max prob), then top-k
//      (the k largest), then top-p (the smallest most-likely set whose mass
//      reaches top_p, renormalised after the earlier filters); ties in sorted
//      order break to the lower id, and at least one token always survives;
//   4. one uniform draw from the sequence's own RNG, inverse CDF over the kept
//      tokens in id order.
// Each sequence owns its RNG (std::mt19937_64, seeded from SamplingParams::seed
// or from a process-wide random source) and advances it exactly once per
// sampled token, greedy included, so a seeded request yields the same tokens
// whatever else is in the batch and wherever its row is.
//
// Log-probs are vLLM's default ("raw"): log-softmax of the model's logits
// before penalties, temperature and filters, computed in double.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "sampling/output_constraint.h"
#include "sampling/token_controls.h"

namespace tpserve {

// Temperatures below this sample greedily (vLLM's _SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;

struct SamplingParams {
  float temperature = 1.0f;         // 0 (below kGreedyTemperature) = greedy
  int32_t top_k = -1;               // -1 or 0 = off; k > 0 keeps the k most likely tokens
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off; prompt and output tokens
  float presence_penalty = 0.0f;    // [-2, 2]; output tokens only
  float frequency_penalty = 0.0f;   // [-2, 2]; output tokens only
  std::optional<uint64_t> seed;     // none = a fresh seed from the process-wide source
  int32_t logprobs = -1;            // -1 = none; n >= 0: the chosen token's and the top n
  // Prompt log-probs (vLLM's prompt_logprobs): -1 = none; n >= 0: each prompt
  // token's log-prob given the tokens before it (the first has none), its
  // rank, and the top n at that position, computed by the workers during
  // prefill (worker/prompt_logprobs.h).
  int32_t prompt_logprobs = -1;
  // Constrained output: rank 0 masks the tokens the grammar forbids before
  // sampling (constrained/sequence_constraint.h); nullptr = free text.
  std::shared_ptr<const OutputConstraint> constraint;
  // logit_bias, allowed_token_ids, bad_words (step 0 above); nullptr = none.
  // Normalized and validated (token_controls.h) by whoever fills it.
  std::shared_ptr<const TokenControls> controls;
};

// OK, or INVALID_ARGUMENT naming the field, its value and the accepted range.
absl::Status ValidateSamplingParams(const SamplingParams& params);

// What a sequence needs to be sampled: its parameters, its RNG and the tokens
// seen so far (for the penalties).
class SequenceSamplingState {
 public:
  // `prompt` feeds the repetition penalty (kept only when it is on);
  // `output` restores the tokens already generated (e.g. after preemption).
  explicit SequenceSamplingState(const SamplingParams& params,
                                 std::span<const int32_t> prompt = {},
                                 std::span<const int32_t> output = {});

  const SamplingParams& params() const { return params_; }
  // Records a generated token (Sample does this for the token it returns).
  void AppendOutput(int32_t token);
  int32_t OutputCount(int32_t token) const;
  bool InPrompt(int32_t token) const { return prompt_tokens_.contains(token); }
  // The next uniform double in [0, 1) from this sequence's RNG (53 random bits).
  double NextUniform();
  // What a device sampler uploads for the penalties (cuda/sampling_inputs.h):
  // the distinct prompt ids (kept only with a repetition penalty) and the
  // generated ids with their counts.
  const absl::flat_hash_set<int32_t>& prompt_tokens() const { return prompt_tokens_; }
  const absl::flat_hash_map<int32_t, int32_t>& output_counts() const { return output_counts_; }
  // Appends the tokens the bad words ban for the next token (AppendBannedTokens
  // over the output's last tokens, which this state keeps for them).
  void AppendBannedTokens(std::vector<int32_t>& out) const;

 private:
  friend void ApplyPenalties(const SequenceSamplingState& seq, std::span<float> logits,
                             std::span<const int32_t> ids);

  SamplingParams params_;
  std::mt19937_64 rng_;
  absl::flat_hash_set<int32_t> prompt_tokens_;          // distinct prompt ids (repetition only)
  absl::flat_hash_map<int32_t, int32_t> output_counts_;  // token id -> times generated
  int32_t tail_length_ = 0;    // params_.controls' TailLength()
  std::vector<int32_t> tail_;  // the last tail_length_ (to 2x) output tokens, oldest first
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0;                             // of `token`, when params.logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;    // [n] (id, logprob), most likely first
};

// Jump-forward (a grammar mask that allows one token): what Sample gives for
// a row whose only candidate is `token`, without reading the row: one RNG
// draw (as every sampled token takes) and the token recorded in the
// sequence's history. Only where that is Sample's answer whatever the row
// holds: ForcedTokenSamplesAlike(params).
SampledToken TakeForcedToken(SequenceSamplingState& seq, int32_t token);
// No token-level controls (a bad word or a bias of the forced token changes
// what the sampler does with it) and no log-probs (they read the row).
inline bool ForcedTokenSamplesAlike(const SamplingParams& p) { return p.controls == nullptr && p.logprobs < 0; }

// One prompt token scored against the logits of the position before it
// (prompt log-probs): raw log-softmax in double, as Sample's log-probs.
struct ScoredToken {
  SampledToken scored;  // token, its log-prob, and the top n (id, log-prob), most likely first
  int32_t rank = 0;     // 1 + the number of tokens with a larger logit (vLLM's rank)
};

// Scores `token` in one row of raw logits [V] with the top n alternatives;
// `scratch` is reused between calls.
ScoredToken ScoreToken(std::span<const float> raw, int32_t token, int32_t n, std::vector<int32_t>& scratch);

// Applies the penalties of `seq` to one row of raw logits in place (step 1 above).
//   logits: [V], token t at t; or, with `ids` ([n] sorted token ids), [n]:
//           token ids[k] at k (a row gathered to its allowed tokens).
void ApplyPenalties(const SequenceSamplingState& seq, std::span<float> logits,
                    std::span<const int32_t> ids = {});

// Applies the row's edits (RowEdits: logit_bias and bans, sorted by token) in
// place, on the same layout as ApplyPenalties: logits[slot] += bias; a token
// not in `ids` is not a candidate and is skipped.
void ApplyRowEdits(std::span<const std::pair<int32_t, float>> edits, std::span<float> logits,
                   std::span<const int32_t> ids = {});

// Samples one token per sequence and records it in that sequence's state.
//   logits: [S, row_stride] host float32, row s for seqs[s]; only the first
//           vocab_size columns are tokens (the rest, e.g. the vocab padding of
//           the tensor-parallel LM head, is ignored). Not modified.
// Returns [S] tokens. Shapes that do not fit abort (a programming error).
std::vector<SampledToken> Sample(std::span<const float> logits, int64_t row_stride,
                                 int64_t vocab_size,
                                 std::span<SequenceSamplingState* const> seqs);

}  // namespace tpserve
