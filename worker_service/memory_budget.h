// How many KV blocks a worker offers (its Profile answer), on the CPU and on a GPU.
//
// The CPU backend keeps the KV cache in ordinary memory, so the budget is a
// share of the host's available memory, measured after the weights and the
// activation buffers were allocated (at Load):
//
//   budget     = MemAvailable * min(utilization, kMaxCpuMemoryFraction) / local ranks
//   max_blocks = min(budget / block_bytes, cap)
//   cap        = max_num_seqs * ceil(max_model_len / block_size)
//
// The local ranks share the host's memory, hence the division. The fraction is
// capped at one half because a CPU host also runs the coordinator and the
// rest of the system (the GPU default of 0.9 would starve them). The cap is the
// most the scheduler can ever hold at once (every sequence at its longest), so
// a big host does not allocate gigabytes that can never be used.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace tpserve {

inline constexpr double kMaxCpuMemoryFraction = 0.5;

// MemAvailable from /proc/meminfo in bytes; UNAVAILABLE when it cannot be read.
absl::StatusOr<uint64_t> MemAvailableBytes();

struct CpuKvBudget {
  uint64_t available_bytes = 0;  // MemAvailable
  double utilization = 0.9;      // Profile.gpu_memory_utilization, in (0, 1]
  int local_ranks = 1;           // workers on this host
  int64_t block_bytes = 0;       // KvCacheBytesPerBlock of this rank
  int64_t max_num_seqs = 0;
  int64_t max_model_len = 0;
  int32_t block_size = 0;
};

// max_blocks as above. INVALID_ARGUMENT for a non-positive field or a
// utilization outside (0, 1]; RESOURCE_EXHAUSTED when not even one block fits.
absl::StatusOr<int64_t> CpuKvBlocks(const CpuKvBudget& budget);

// The CUDA backend keeps the KV cache in GPU memory. The worker measures the
// device after loading the weights and running a forward of the largest step
// (so activations and library workspaces are in), then:
//
//   used       = total - free          (this rank, its neighbours on the device, anyone else)
//   budget     = (total * utilization - used) / ranks_per_device - reserve
//   max_blocks = min(budget / block_bytes, cap)          (cap as above)
//
// `reserve` is kept back for what comes after the profile (CUDA graph capture).
struct GpuKvBudget {
  uint64_t total_bytes = 0;    // cudaMemGetInfo after the profile forward
  uint64_t free_bytes = 0;
  double utilization = 0.9;    // --gpu-memory-utilization, in (0, 1]
  int ranks_per_device = 1;    // ranks sharing this GPU (GpuPlacement)
  uint64_t reserve_bytes = 0;
  int64_t block_bytes = 0;
  int64_t max_num_seqs = 0;
  int64_t max_model_len = 0;
  int32_t block_size = 0;
};

// INVALID_ARGUMENT for a bad field; RESOURCE_EXHAUSTED, with what uses the
// memory and what to change, when not even one block fits.
absl::StatusOr<int64_t> GpuKvBlocks(const GpuKvBudget& budget);

}  // namespace tpserve
