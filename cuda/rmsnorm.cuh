// RMSNorm and fused residual-add + RMSNorm (Backend::RmsNorm / AddRmsNorm).
// Statistics in fp32; bf16 storage. Two kernel sets (cuda/kernel_set.h): the
// reference kernels (any D, one bf16 per load) and the vector kernels (16-byte
// loads and stores, each thread holding its part of the row in registers
// between the one block reduction and the output), both one block per row.
// One block per row at batch 1 too: docs/architecture.md ("CUDA kernels")
// says why spreading a row over blocks would not pay.
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

// The vector kernels: the same contracts as the two above, for rows that
// RmsNormVecSupports: D a multiple of 8 up to kRmsNormVecMaxDim and every
// pointer given (x, w, out / residual) 16-byte aligned. cudaErrorInvalidValue for any other.
// `programmatic`: launch with PDL (cuda/simt.cuh; sm_90+ only).
inline constexpr int64_t kRmsNormVecMaxDim = 32768;  // 1024 threads x 4 vectors of 8
bool RmsNormVecSupports(int64_t D, const void* a, const void* b, const void* c, const void* d = nullptr);
cudaError_t LaunchRmsNormVec(const __nv_bfloat16* x, const __nv_bfloat16* w, float eps, int64_t M, int64_t D,
                             __nv_bfloat16* out, cudaStream_t stream, bool programmatic = false);
cudaError_t LaunchAddRmsNormVec(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w, float eps,
                                int64_t M, int64_t D, cudaStream_t stream, bool programmatic = false);

}  // namespace tpserve::cuda
