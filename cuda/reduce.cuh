// Device helpers shared by the kernels: warp and block sums in fp32, and the
// grid size of a grid-stride loop. Include only from .cu files.
#pragma once

#include <cstdint>

#include "cuda/simt.cuh"

namespace tpserve::cuda {

constexpr int kWarpSize = 32;

// Sum of v over the 32 lanes; every lane gets the result.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. Contains __syncthreads: call from all threads.
__device__ __forceinline__ float BlockSum(float v) {
  TPSERVE_SHARED_ARRAY(float, partial, 32);  // [warps]
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  v = WarpSum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < num_warps; ++w) total += partial[w];
  return total;
}

// The "last block" pattern (the sliced sampler, the fast decode attention's
// merge, the QKV GEMV's q/k epilogue): each of `blocks` blocks that share
// `counter` calls this once its results are stored; every thread's stores are
// fenced before the block arrives, and the block that arrives last fences
// again, so what the others stored is visible to its L2 loads (__ldcg), and
// puts the counter back to 0 for the next launch or graph replay. True, in
// every thread, for that block only. Contains __syncthreads: call from every
// thread of the block.
__device__ __forceinline__ bool LastBlockToArrive(uint32_t* counter, uint32_t blocks) {
  TPSERVE_SHARED(uint32_t, arrived);
  __threadfence();
  __syncthreads();  // every thread's stores and fence before the arrival
  if (threadIdx.x == 0) arrived = atomicAdd(counter, 1u);
  __syncthreads();
  if (arrived != blocks - 1) return false;
  __threadfence();
  if (threadIdx.x == 0) *counter = 0;  // every block sharing it has arrived: nobody else touches it
  return true;
}

// Blocks for a grid-stride loop over n elements with `threads` per block.
inline unsigned GridStrideBlocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

}  // namespace tpserve::cuda
