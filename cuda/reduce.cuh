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

// Blocks for a grid-stride loop over n elements with `threads` per block.
inline unsigned GridStrideBlocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

}  // namespace tpserve::cuda
