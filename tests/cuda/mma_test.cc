// The m16n8k16 bf16 tensor-core mma (cuda/mma.cuh) against a plain matmul,
// through LaunchMmaSelfTest (cuda/mma_selftest.cuh), which loads every element
// into the fragment layout mma.cuh documents. Built twice: label gpu (the real
// instruction; skips without a device) and label cuda-emu (the emulation). The
// matrices are small integers, exact in bf16 and in fp32 sums, with no
// symmetry: a transposed operand, two swapped fragment registers or swapped
// halves of a register give a wrong element, and the comparison is exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/mma_selftest.cuh"
#include "model/dtype.h"
#include "tests/cuda/gpu_test_util.h"

namespace tpserve {
namespace {

template <typename T>
T* ToDevice(const std::vector<T>& v) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

TEST(MmaTest, M16N8K16Bf16MatchesAPlainMatmulElementForElement) {
  TPSERVE_REQUIRE_GPU();
  // Integers in [-8, 8] from a fixed LCG: no two blocks of a matrix alike
  // (a periodic formula once let swapped A fragments pass).
  uint32_t x = 12345;
  const auto next = [&x] {
    x = x * 1103515245u + 12345u;
    return static_cast<float>(static_cast<int>((x >> 16) % 17) - 8);
  };
  std::vector<float> A(16 * 16), B(16 * 8), C(16 * 8);
  for (float& a : A) a = next();
  for (float& b : B) b = next();
  for (float& c : C) c = next() * 0.5f;
  std::vector<uint16_t> a16(A.size()), b16(B.size());
  for (size_t i = 0; i < A.size(); ++i) a16[i] = FloatToBf16(A[i]);
  for (size_t i = 0; i < B.size(); ++i) b16[i] = FloatToBf16(B[i]);

  uint16_t* da = ToDevice(a16);
  uint16_t* db = ToDevice(b16);
  float* dc = ToDevice(C);
  float* dd = ToDevice(std::vector<float>(16 * 8, -1.f));
  ASSERT_EQ(cuda::LaunchMmaSelfTest(reinterpret_cast<const __nv_bfloat16*>(da),
                                    reinterpret_cast<const __nv_bfloat16*>(db), dc, dd, nullptr),
            cudaSuccess);
  std::vector<float> D(16 * 8);
  CUDA_CHECK(cudaMemcpy(D.data(), dd, D.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(dd)}) {
    CUDA_CHECK(cudaFree(p));
  }
  for (int i = 0; i < 16; ++i) {
    for (int n = 0; n < 8; ++n) {
      float want = C[i * 8 + n];
      for (int k = 0; k < 16; ++k) want += A[i * 16 + k] * B[k * 8 + n];
      EXPECT_EQ(D[i * 8 + n], want) << "D[" << i << "][" << n << "]";
    }
  }
}

}  // namespace
}  // namespace tpserve
