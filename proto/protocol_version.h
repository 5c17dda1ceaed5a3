// The version of the coordinator <-> worker protocol (tpserve/internal/v1/worker.proto).
// Workers send it in Hello; the coordinator refuses a worker whose version differs.
// Bump it whenever worker.proto changes incompatibly.
#pragma once

#include <cstdint>

namespace tpserve {

inline constexpr uint32_t kWorkerProtocolVersion = 1;

// The most log-prob alternatives a request may ask for per token: the
// coordinator refuses more, workers reject a step that asks for more, and the
// GPU sampler's buffers are sized for it.
inline constexpr int32_t kMaxLogprobs = 20;

}  // namespace tpserve
