// Limits of the sampler that every layer above it shares: the coordinator
// refuses a request beyond them, the workers reject a step beyond them, and the
// GPU sampler sizes its buffers for them.
#pragma once

#include <cstdint>

namespace tpserve {

// The most log-prob alternatives a request may ask for per token.
inline constexpr int32_t kMaxLogprobs = 20;

// Token-level controls (sampling/token_controls.h). logit_bias: OpenAI's 300
// entries, each bias in [-100, 100]. allowed_token_ids: a bound on the list
// (duplicates count; any real vocabulary is smaller). bad_words: vLLM's
// bounds on the words of one request and their tokens together.
inline constexpr int32_t kMaxLogitBias = 300;
inline constexpr float kMaxLogitBiasValue = 100.0f;
inline constexpr int32_t kMaxAllowedTokenIds = 262144;
inline constexpr int32_t kMaxBadWords = 128;
inline constexpr int32_t kMaxBadWordTokens = 1024;

}  // namespace tpserve
