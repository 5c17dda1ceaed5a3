// cuda/norm_rope_rows.cuh's VecRowsSumSquares, which the GEMV's RMSNorm
// prologue runs in its block of 256 threads, against the vector RmsNorm
// kernel's own statistic: that kernel's loop (AddSquares over each thread's
// vectors, cuda/rmsnorm.cu) and BlockSum, in a block of RmsNormVecThreads(D)
// threads, bit for bit, for rows of 8 to 32,768 elements (1 to 4 vectors a
// thread, 1 to 32 warps: the 256 threads play up to 4 of the vector block's
// threads each). A different order of the same additions (the warps' sums
// added last first, say) changes the float in the last bits, which the fused
// kernel's outputs show only now and then; this test sees it every time.
// Emulated only: the kernels are defined here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/norm_rope_rows.cuh"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"
#include "model/dtype.h"

namespace tpserve::cuda {
namespace {

constexpr int kRows = 3;

// One block per row of RmsNormVecThreads(D) threads, summing as
// RmsNormVecKernel does before it normalises.
__global__ void VectorKernelSums(const __nv_bfloat16* x, int64_t D, float* out) {
  const int64_t vecs = D / kBf16PerVec;
  const __nv_bfloat16* row = x + blockIdx.x * D;
  float sq = 0.f;
  for (int i = 0; i < kRmsNormMaxVecsPerThread; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * blockDim.x;
    if (c >= vecs) break;
    AddSquares(LoadBf16x8(row, c), sq);
  }
  const float total = BlockSum(sq);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

// One block of any size over all kRows rows, as the GEMV's prologue.
__global__ void PlayedSums(const __nv_bfloat16* x, int64_t D, float* out) {
  float total[kRows];
  VecRowsSumSquares<kRows>(x, D, total);
  if (threadIdx.x == 0) {
    for (int m = 0; m < kRows; ++m) out[m] = total[m];
  }
}

TEST(NormRowsTest, VecRowsSumSquaresIsTheVectorKernelsSumBitForBit) {
  std::mt19937 rng(31);
  for (int64_t d : {8, 64, 2048, 2056, 8192, 8200, 16392, 24584, 32768}) {
    // Magnitudes from 2^-6 to 2^6, so the order of the additions shows in the last bits.
    std::vector<uint16_t> x(static_cast<size_t>(kRows * d));
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_int_distribution<int> exponent(-6, 6);
    for (uint16_t& v : x) v = FloatToBf16(std::ldexp(normal(rng), exponent(rng)));
    std::vector<float> want(kRows), played(kRows);
    const int threads = RmsNormVecThreads(d);
    TPSERVE_LAUNCH(VectorKernelSums, kRows, threads, 0, nullptr)(reinterpret_cast<const __nv_bfloat16*>(x.data()), d,
                                                                 want.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << emu::LastReport();
    for (int block : {32, 256, 1024}) {
      TPSERVE_LAUNCH(PlayedSums, 1, block, 0, nullptr)(reinterpret_cast<const __nv_bfloat16*>(x.data()), d,
                                                       played.data());
      ASSERT_EQ(cudaGetLastError(), cudaSuccess) << emu::LastReport();
      for (int m = 0; m < kRows; ++m) {
        EXPECT_EQ(std::memcmp(&played[m], &want[m], sizeof(float)), 0)
            << "D=" << d << " (" << threads << " threads) played by " << block << ", row " << m << ": " << played[m]
            << " vs " << want[m];
      }
    }
  }
}

}  // namespace
}  // namespace tpserve::cuda
