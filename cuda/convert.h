// Element-type conversion on the device (loading an f32 or f16 checkpoint into
// bf16 weights, reading bf16 activations back as f32 for comparisons).
// Launchers take a stream, never allocate, and return the launch's error.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// out[i] = bf16(in[i]) (round to nearest even), i < n.
cudaError_t F32ToBf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream);
// out[i] = float(in[i]), i < n.
cudaError_t Bf16ToF32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream);

}  // namespace tpserve::cuda
