// The version of the coordinator <-> worker protocol (tpserve/internal/v1/worker.proto).
// Workers send it in Hello; the coordinator refuses a worker whose version differs.
// Bump it whenever worker.proto changes incompatibly.
#pragma once

#include <cstdint>

namespace tpserve {

inline constexpr uint32_t kWorkerProtocolVersion = 4;

}  // namespace tpserve
