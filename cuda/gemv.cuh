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
// GemvSupports is false or the plan does not cover N. `programmatic`: launch
// with PDL (cuda/simt.cuh; sm_90+ only): the kernel waits for the previous
// one at its top.
cudaError_t LaunchGemv(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t M,
                       int64_t N, int64_t K, __nv_bfloat16* y, const GemvPlan& plan, cudaStream_t stream,
                       bool programmatic = false);

// The MLP's gate/up projection and SiLU-and-mul in one launch:
//   out[m, f] = silu(g) · u,  g = bf16(Σ_k x[m, k] · w[f, k]),  u = bf16(Σ_k x[m, k] · w[F + f, k])
//   x: [M, K] bf16   w: [2F, K] bf16 = [gate; up] (a rank's MergedColumnParallelLinear shard)
//   out: [M, F] bf16
// A block computes gate row f and up row F + f together, so the [M, 2F]
// gate_up activation is never written: one launch and one round trip through
// memory fewer than LaunchGemv + LaunchSiluMul, with the same roundings (gate
// and up to bf16 first); under the same split (PlanGemvSiluMul's k_split equal
// to PlanGemv(2F, K)'s) the same bits. Requires GemvSupports(x, w, M, 2F, K);
// `plan` is PlanGemvSiluMul(F, K, SMs) (or any split of at least two columns
// per block that covers F); cudaErrorInvalidValue otherwise.
cudaError_t LaunchGemvSiluMul(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t M, int64_t F, int64_t K,
                              __nv_bfloat16* out, const GemvPlan& plan, cudaStream_t stream,
                              bool programmatic = false);

}  // namespace tpserve::cuda
