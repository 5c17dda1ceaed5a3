// Byte copies between host and device memory for the communicators (host
// staging of CUDA tensors in the gloo communicator, the world-size-1 copies).
// device_copy_cuda.cc implements it in CUDA builds; device_copy_cpu.cc in
// builds without CUDA, where a kCuda side is FAILED_PRECONDITION.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "backend/tensor.h"

namespace tpserve::comm_internal {

// Copies n bytes; synchronous (returns when dst holds the data).
absl::Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);

}  // namespace tpserve::comm_internal
