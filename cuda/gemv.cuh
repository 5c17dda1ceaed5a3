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

// ---- the decoder layer's GEMVs with their neighbours folded in (tp 1) ----
// Each gives the bits of the unfused kernels it replaces (the GEMV above,
// then the vector RmsNorm / AddRmsNorm of cuda/rmsnorm.cuh, or the fused
// q/k-norm + RoPE + KV store of cuda/qk_norm_rope.cuh) under the same plan:
// the shared row math is cuda/norm_rope_rows.cuh. Requirements beyond
// GemvSupports: RmsNormVecSupports(K, x, norm, w) for the RMSNorm prologue.

// residual[m, n] += y[m, n], y = bf16(Σ_k x[m, k] · w[n, k] (+ bias[n])): the
// GEMV, then the residual add of AddRmsNorm (y rounded to bf16 as the GEMV
// stores it, the sum rounded again), with y never written. The row-parallel
// o_proj and down_proj at tp 1. `plan` as LaunchGemv's.
//   x: [M, K]   w: [N, K]   bias: [N] or null   residual: [M, N] in/out
cudaError_t LaunchGemvAddResidual(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                                  int64_t M, int64_t N, int64_t K, __nv_bfloat16* residual, const GemvPlan& plan,
                                  cudaStream_t stream, bool programmatic = false);

// LaunchGemvSiluMul of RmsNorm(x) · norm: each block first finds its rows'
// RMS the way the vector RmsNorm kernel does (VecRowsSumSquares) and scales
// x as that kernel stores it, so the normalised [M, K] activation is never
// written: the post-attention norm and the MLP's gate/up + SiLU in one launch.
//   x: [M, K] (the residual stream)   norm: [K]   w: [2F, K]   out: [M, F]
cudaError_t LaunchRmsNormGemvSiluMul(const __nv_bfloat16* x, const __nv_bfloat16* norm, float eps,
                                     const __nv_bfloat16* w, int64_t M, int64_t F, int64_t K, __nv_bfloat16* out,
                                     const GemvPlan& plan, cudaStream_t stream, bool programmatic = false);

// The QKV projection's epilogue: q/k RMSNorm (optional) + RoPE + K/V store
// (LaunchQkNormRopeStoreKv's contract) on the GEMV's output.
struct GemvQkRope {
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;  // Hq, Hkv, hd: N = (Hq + 2 Hkv) · hd
  const int32_t* positions = nullptr;                 // [M] (the step's tokens)
  const int64_t* slot_mapping = nullptr;              // [M] cache slot, -1: not stored
  const __nv_bfloat16* q_norm = nullptr;              // [hd] or null
  const __nv_bfloat16* k_norm = nullptr;              // [hd] or null
  float eps = 0.f;
  const float* rope = nullptr;                        // [max_position, hd] = [cos | sin]
  __nv_bfloat16* k_cache = nullptr;                   // [slots, Hkv · hd]
  __nv_bfloat16* v_cache = nullptr;                   // [slots, Hkv · hd]
  // [Hq + Hkv] arrival counters, zero before the first launch (cudaMemset);
  // every launch leaves them zero.
  uint32_t* arrivals = nullptr;
};

// qkv = RmsNorm(x) · norm · wᵀ (+ bias), then LaunchQkNormRopeStoreKv's work
// on it: the input norm, the QKV projection, q/k norm, RoPE and the K/V store
// of a decoder layer in one launch. A v column goes to the V cache as it is
// written; a q or k head is finished by the last of its blocks to arrive
// (hd / cols_per_block of them: the sliced sampler's "last block" pattern),
// which normalises and rotates its rows in place and stores k. `plan`:
// PlanGemv(N, K) with head_dim a multiple of cols_per_block.
//   x: [M, K]   norm: [K]   w: [N, K]   bias: [N] or null   qkv: [M, N] out
cudaError_t LaunchRmsNormGemvQkRope(const __nv_bfloat16* x, const __nv_bfloat16* norm, float eps,
                                    const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t M, int64_t N,
                                    int64_t K, __nv_bfloat16* qkv, const GemvQkRope& qk, const GemvPlan& plan,
                                    cudaStream_t stream, bool programmatic = false);

}  // namespace tpserve::cuda
