// What a worker reports about its GPU (Hello) and measures for the KV budget
// (Profile): the device's name and its free and total memory; and what the
// kernels size their grids by (the number of SMs).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tpserve::cuda {

struct DeviceInfo {
  int index = 0;            // among the visible devices (CUDA_VISIBLE_DEVICES respected)
  std::string name;         // "NVIDIA H200"
  uint64_t free_bytes = 0;  // cudaMemGetInfo: free now, for every process on the device
  uint64_t total_bytes = 0;
  int multiprocessors = 0;  // SMs (132 on an H200): grid planning, e.g. cuda/gemv_plan.h
  int compute_major = 0;    // compute capability's major (9 on an H200): PDL needs 9 or more
};

// Makes `device` current on this thread and queries it (this creates the
// device's context, as using it would). UNAVAILABLE when there is no such
// device, naming how many are visible.
absl::StatusOr<DeviceInfo> QueryDevice(int device);

}  // namespace tpserve::cuda
