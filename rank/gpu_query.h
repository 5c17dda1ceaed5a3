// The GPU a rank uses with the CUDA backend, and what it holds: answered the
// same way in every build (a build without CUDA sees no GPU), so callers need
// no build switches.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "comm/gpu_placement.h"
#include "comm/rank_env.h"

namespace tpserve {

struct GpuInfo {
  int device = 0;            // index among the visible devices
  std::string name;          // "NVIDIA H200"
  uint64_t free_bytes = 0;   // free now, for every process on the device
  uint64_t total_bytes = 0;
};

// True when this build has the CUDA backend.
bool BuiltWithCuda();

// comm/gpu_placement.h's PlaceOnGpu over the visible devices and the
// communicators this build has. FAILED_PRECONDITION when this build has no
// CUDA or no device is visible, naming what to do.
absl::StatusOr<GpuPlacement> PlaceRankOnGpu(const RankEnv& env);

// Makes `device` current on this thread and queries it. FAILED_PRECONDITION in
// a build without CUDA, UNAVAILABLE when there is no such device.
absl::StatusOr<GpuInfo> QueryGpu(int device);

// The GPU this rank would use (PlaceRankOnGpu's device; local_rank % devices
// when the placement itself fails, e.g. for a missing communicator), queried.
// An error when this build has no CUDA or no device is visible.
absl::StatusOr<GpuInfo> QueryRankGpu(const RankEnv& env);

}  // namespace tpserve
