// Limits of the sampler that every layer above it shares: the coordinator
// refuses a request beyond them, the workers reject a step beyond them, and the
// GPU sampler sizes its buffers for them.
#pragma once

#include <cstdint>

namespace tpserve {

// The most log-prob alternatives a request may ask for per token.
inline constexpr int32_t kMaxLogprobs = 20;

}  // namespace tpserve
