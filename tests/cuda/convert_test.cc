#include "cuda/convert.h"

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <random>
#include <vector>

#include "cuda/check.h"
#include "model/dtype.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_sizes.h"

namespace tpserve::cuda {
namespace {

TEST(CudaConvert, MatchesHostConversionForOddSizes) {
  TPSERVE_REQUIRE_GPU();
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{19}, int64_t{111}, cuda_test::kLargeDim}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> dist(0.0f, 10.0f);
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    float* d_in = nullptr;
    float* d_back = nullptr;
    __nv_bfloat16* d_bf = nullptr;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_back, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_bf, n * sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMemset(d_back, 0xff, n * sizeof(float)));  // poison: NaN
    CUDA_CHECK(cudaMemcpy(d_in, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(F32ToBf16(d_in, d_bf, n, nullptr));
    CUDA_CHECK(Bf16ToF32(d_bf, d_back, n, nullptr));
    std::vector<uint16_t> bf(n);
    std::vector<float> back(n);
    CUDA_CHECK(cudaMemcpy(bf.data(), d_bf, n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(back.data(), d_back, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bf[i], FloatToBf16(x[i])) << "n=" << n << " i=" << i;
      ASSERT_EQ(back[i], Bf16ToFloat(bf[i])) << "n=" << n << " i=" << i;
    }
    cudaFree(d_in);
    cudaFree(d_back);
    cudaFree(d_bf);
  }
}

}  // namespace
}  // namespace tpserve::cuda
