// The thread block of the sampling kernels (sampling.cu: one block per row;
// sampling_sliced.cu: one block per slice of a row): block-wide reductions and
// scans in a fixed order, with the contract of sampling::SerialBlock
// (sampling/sampling_row.h). Included by .cu files only (cuda/simt.cuh first).
#pragma once

#include <cstdint>

#include "cuda/simt.cuh"
#include "sampling/sampling_row.h"

namespace tpserve::cuda {

__device__ __forceinline__ int64_t ShflXor(int64_t v, int mask) {
  return __shfl_xor_sync(0xffffffffu, static_cast<long long>(v), mask);
}
__device__ __forceinline__ double ShflXor(double v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ float ShflXor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ int32_t ShflXor(int32_t v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ int64_t ShflUp(int64_t v, int offset) {
  return __shfl_up_sync(0xffffffffu, static_cast<long long>(v), offset);
}
__device__ __forceinline__ double ShflUp(double v, int offset) { return __shfl_up_sync(0xffffffffu, v, offset); }
__device__ __forceinline__ sampling::ValueId ShflXor(sampling::ValueId v, int mask) {
  return sampling::ValueId{ShflXor(v.value, mask), ShflXor(v.id, mask)};
}

// The block of the row algorithm (see SerialBlock in sampling_row.h for the
// contract). Reductions are in a fixed order: lane 0 of each warp after a
// butterfly, then the warps in order, read by every thread alike, so every
// thread gets the same bits and the result does not change from run to run.
template <int kThreads>
struct CudaBlock {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
  static constexpr int kWarps = kThreads / 32;

  __device__ int32_t thread() const { return static_cast<int32_t>(threadIdx.x); }
  __device__ int32_t size() const { return kThreads; }
  __device__ void Sync() { __syncthreads(); }

  template <typename T, typename Op>
  __device__ T Reduce(T v, Op op) {
    TPSERVE_SHARED_ARRAY(T, partial, kWarps);
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, ShflXor(v, offset));
    __syncthreads();  // partial may still be read by the previous reduction
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    T r = partial[0];
    for (int w = 1; w < kWarps; ++w) r = op(r, partial[w]);
    return r;
  }

  __device__ int64_t Sum(int64_t v) { return Reduce(v, [](int64_t a, int64_t b) { return a + b; }); }
  __device__ double Sum(double v) { return Reduce(v, [](double a, double b) { return a + b; }); }
  __device__ float Min(float v) { return Reduce(v, [](float a, float b) { return fminf(a, b); }); }
  __device__ float Max(float v) { return Reduce(v, [](float a, float b) { return fmaxf(a, b); }); }
  __device__ int32_t MinId(int32_t v) {
    return Reduce(v, [](int32_t a, int32_t b) { return a < b ? a : b; });
  }
  __device__ int32_t MaxId(int32_t v) {
    return Reduce(v, [](int32_t a, int32_t b) { return a > b ? a : b; });
  }
  __device__ sampling::ValueId ArgMax(sampling::ValueId v) {
    return Reduce(v, [](sampling::ValueId a, sampling::ValueId b) { return sampling::Better(b, a) ? b : a; });
  }

  // Σ of v over the threads before this one (thread order); *total: over all.
  // T: double or int64_t.
  template <typename T>
  __device__ T ExclusiveSum(T v, T* total) {
    TPSERVE_SHARED_ARRAY(T, warp_sums, kWarps);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    T inclusive = v;
    for (int offset = 1; offset < 32; offset *= 2) {
      const T other = ShflUp(inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    T exclusive = ShflUp(inclusive, 1);
    if (lane == 0) exclusive = 0;
    __syncthreads();
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    T before = 0, all = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w == warp) before = all;
      all += warp_sums[w];
    }
    *total = all;
    return before + exclusive;
  }

  __device__ void AtomicOr(uint32_t* word, uint32_t bits) { atomicOr(word, bits); }
  __device__ int32_t AtomicAdd(int32_t* counter, int32_t n) { return atomicAdd(counter, n); }
};

}  // namespace tpserve::cuda
