// RMSNorm and fused residual-add + RMSNorm (Backend::RmsNorm / AddRmsNorm).
// Statistics in fp32; bf16 storage.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// out[m] = x[m] / sqrt(mean(x[m]²) + eps) * w.
//   x: [M, D] bf16   w: [D] bf16   out: [M, D] bf16 (may be x)
cudaError_t LaunchRmsNorm(const __nv_bfloat16* x, const __nv_bfloat16* w, float eps, int64_t M,
                          int64_t D, __nv_bfloat16* out, cudaStream_t stream);

// residual[m] += x[m] (rounded to bf16); x[m] = RmsNorm(residual[m]) * w.
//   x: [M, D] bf16 in/out   residual: [M, D] bf16 in/out   w: [D] bf16
cudaError_t LaunchAddRmsNorm(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w,
                             float eps, int64_t M, int64_t D, cudaStream_t stream);

}  // namespace tpserve::cuda
