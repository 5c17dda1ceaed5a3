// The row math that both an op's own kernel and the GEMV that fuses it run
// (cuda/gemv.cu's RMSNorm prologue and q/k-norm + RoPE epilogue), written
// once so the fused kernel stores the unfused kernels' bits:
//   * the vector RmsNorm kernels' row statistic Σ x² (cuda/rmsnorm.cu), with
//     its exact order of additions reproduced by a block of any size;
//   * one q or k head's RMSNorm + rotate-half RoPE (cuda/qk_norm_rope.cu).
// The roundings are spelled out (__fmaf_rn, __fmul_rn) so that no kernel's
// code generation can contract them differently. Include only from .cu files.
#pragma once

#include <cstdint>

#include "cuda/host_device.h"
#include "cuda/reduce.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {

// 16-byte vectors a thread of the vector RmsNorm kernels holds, at most.
inline constexpr int kRmsNormMaxVecsPerThread = static_cast<int>(kRmsNormVecMaxDim / (kBf16PerVec * 1024));

// The vector RmsNorm kernels' block for rows of D (a multiple of 8, at most
// kRmsNormVecMaxDim): a multiple of 32 threads, at most 1024, each thread
// holding vectors t, t + threads, ... (at most kRmsNormMaxVecsPerThread).
TPSERVE_HOST_DEVICE inline int RmsNormVecThreads(int64_t D) {
  const int64_t vecs = D / kBf16PerVec;
  const int64_t per_thread = (vecs + 1023) / 1024;
  const int64_t threads = (vecs + per_thread - 1) / per_thread;
  return static_cast<int>((threads + 31) / 32 * 32);
}

// sq += Σ_j v_j², the 8 bf16 of v in order, each with one fused multiply-add.
__device__ __forceinline__ void AddSquares(const uint4& v, float& sq) {
  float f[kBf16PerVec];
  UnpackBf16x8(v, f);
#pragma unroll
  for (int j = 0; j < kBf16PerVec; ++j) sq = __fmaf_rn(f[j], f[j], sq);
}

// Σ x² of each of the kRows rows of x ([kRows, D] bf16, 16-byte aligned) as
// the vector RmsNorm kernel adds it in its block of RmsNormVecThreads(D)
// threads: its thread v the squares of its vectors v, v + threads, ... in that
// order (AddSquares), each warp's 32 threads by WarpSum, the warps' sums in
// warp order (BlockSum). A block of any blockDim.x (a multiple of 32) plays
// those threads, thread t being t, t + blockDim.x, ..., so the result is the
// same float. Every thread gets every row's. Contains __syncthreads: call
// from every thread.
template <int kRows>
__device__ void VecRowsSumSquares(const __nv_bfloat16* x, int64_t D, float (&total)[kRows]) {
  TPSERVE_SHARED_ARRAY(float, warp_sums, kRows * 32);  // [row, warp of the vector kernel's block]
  const int64_t vecs = D / kBf16PerVec;
  const int threads = RmsNormVecThreads(D), lane = static_cast<int>(threadIdx.x) % kWarpSize;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const __nv_bfloat16* row = x + m * D;
    // v - lane: the first thread of v's warp, the same for the warp (threads % 32 == 0).
    for (int v = static_cast<int>(threadIdx.x); v - lane < threads; v += static_cast<int>(blockDim.x)) {
      float sq = 0.f;
#pragma unroll
      for (int i = 0; i < kRmsNormMaxVecsPerThread; ++i) {
        const int64_t c = v + int64_t{i} * threads;
        if (c >= vecs) break;
        AddSquares(LoadBf16x8(row, c), sq);
      }
      sq = WarpSum(sq);
      if (lane == 0) warp_sums[m * 32 + v / kWarpSize] = sq;
    }
  }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    total[m] = 0.f;
    for (int w = 0; w < threads / kWarpSize; ++w) total[m] += warp_sums[m * 32 + w];
  }
}

// 1 / sqrt(Σ x² / D + eps): the vector RmsNorm's scale of a row.
__device__ __forceinline__ float RmsNormScale(float sum_squares, int64_t D, float eps) {
  return rsqrtf(sum_squares / static_cast<float>(D) + eps);
}

// One q or k head of hd values in place (head, bf16), thread i < hd/2 owning
// the rotate-half pair (i, i + hd/2): RMSNorm with `norm` ([hd], null for
// none; the statistic by BlockSum over the whole block, the threads past
// hd/2 adding 0), then RoPE from rope_row = [cos | sin] of the token's
// position; the rotated values go back to `head` and, when `cache_row` is not
// null, to the K cache. `head` is read from L2 (__ldcg): in the fused GEMV
// other blocks of the launch wrote it. Contains __syncthreads when `norm` is
// given (uniform over the block): call from every thread.
__device__ __forceinline__ void NormRopeHead(__nv_bfloat16* head, const __nv_bfloat16* norm, float eps, int hd,
                                             const float* rope_row, __nv_bfloat16* cache_row) {
  const int half = hd / 2, i = static_cast<int>(threadIdx.x);
  const bool owns = i < half;
  float a = owns ? __bfloat162float(__ldcg(head + i)) : 0.f, b = owns ? __bfloat162float(__ldcg(head + i + half)) : 0.f;
  if (norm != nullptr) {
    const float inv = rsqrtf(BlockSum(__fmaf_rn(a, a, __fmul_rn(b, b))) / static_cast<float>(hd) + eps);
    if (owns) {
      a = __fmul_rn(__fmul_rn(a, inv), __bfloat162float(norm[i]));
      b = __fmul_rn(__fmul_rn(b, inv), __bfloat162float(norm[i + half]));
    }
  }
  if (!owns) return;
  const float cos = rope_row[i], sin = rope_row[half + i];
  const __nv_bfloat16 ra = __float2bfloat16(__fmaf_rn(a, cos, -__fmul_rn(b, sin)));
  const __nv_bfloat16 rb = __float2bfloat16(__fmaf_rn(b, cos, __fmul_rn(a, sin)));
  head[i] = ra;
  head[i + half] = rb;
  if (cache_row != nullptr) {
    cache_row[i] = ra;
    cache_row[i + half] = rb;
  }
}

}  // namespace tpserve::cuda
