// The small-batch GEMV: Backend::Linear for M <= kGemvMaxRows (decode steps of
// a few sequences), where a GEMM library's tiles sit mostly idle and the time
// is reading the weights once. The split of work is cuda/gemv_plan.h.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda/gemv_plan.h"

namespace tpserve::cuda {

// Whether LaunchGemv takes this Linear: 1 <= M <= kGemvMaxRows, K a positive
// multiple of 8, N and K within int32, and x and w 16-byte aligned (so every
// row of both starts on a 16-byte boundary).
bool GemvSupports(const void* x, const void* w, int64_t M, int64_t N, int64_t K);

// y[m, n] = Σ_k x[m, k] · w[n, k] (+ bias[n]): fp32 accumulation, the bias
// added in fp32 before the one rounding to bf16.
//   x: [M, K] bf16   w: [N, K] bf16   bias: [N] bf16 or null   y: [M, N] bf16
// Each weight byte is read once, with 16-byte loads; no allocation, no host
// synchronisation (CUDA-graph capturable). `plan` is PlanGemv(N, K, SMs)
// (tests pass others to reach every split). cudaErrorInvalidValue when
// GemvSupports is false or the plan does not cover N.
cudaError_t LaunchGemv(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t M,
                       int64_t N, int64_t K, __nv_bfloat16* y, const GemvPlan& plan, cudaStream_t stream);

}  // namespace tpserve::cuda
