// The CPU GEMM (backend/cpu_gemm.h) against the order of operations its
// header writes down, spelled out here as a scalar loop: every kernel this
// CPU supports gives exactly those bits, for any M, any row position, tile
// and panel remainders, K tails and several K blocks, on one thread or
// several. Since the order names only the row of x and the row of w, that is
// batch invariance; a test checks it directly as well.
#include "backend/cpu_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tests/backend/cpu_test_util.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

using testing::RandomFloats;

// cpu_gemm.h's order for one element: a chain of fused multiply-adds per K
// block, the blocks' sums added to the bias in order.
float ReferenceElement(const float* x, const float* w, const float* bias, int64_t n, int64_t K) {
  float s = bias ? bias[n] : 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kCpuGemmBlockK) {
    float a = 0.0f;
    for (int64_t k = k0; k < std::min(K, k0 + kCpuGemmBlockK); ++k) a = std::fma(x[k], w[k], a);
    s = s + a;
  }
  return s;
}

std::vector<float> Reference(const std::vector<float>& x, const std::vector<float>& w, const float* bias,
                             int64_t M, int64_t N, int64_t K) {
  std::vector<float> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) y[m * N + n] = ReferenceElement(&x[m * K], &w[n * K], bias, n, K);
  }
  return y;
}

std::vector<CpuGemmKernel> SupportedKernels() {
  std::vector<CpuGemmKernel> out;
  for (CpuGemmKernel k : {CpuGemmKernel::kPortable, CpuGemmKernel::kAvx2, CpuGemmKernel::kAvx512}) {
    if (CpuGemmSupported(k)) out.push_back(k);
  }
  return out;
}

// The first element where a and b differ in their bits, or -1.
int64_t FirstBitDifference(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  }
  return -1;
}

class CpuGemmTest : public ::testing::Test {
 protected:
  uint64_t seed_ = testing_util::TestSeed();
  std::mt19937_64 rng_{seed_};
};
#define TRACE_SEED SCOPED_TRACE(::testing::Message() << "seed " << seed_)

TEST_F(CpuGemmTest, TheSelectedKernelIsTheWidestTheCpuHas) {
  const CpuGemmKernel k = CpuGemmSelected();
  EXPECT_TRUE(CpuGemmSupported(k));
  EXPECT_TRUE(CpuGemmSupported(CpuGemmKernel::kPortable));
  if (CpuGemmSupported(CpuGemmKernel::kAvx512)) {
    EXPECT_EQ(k, CpuGemmKernel::kAvx512);
  }
  ::testing::Test::RecordProperty("cpu_gemm_kernel", CpuGemmKernelName(k));
}

// Every supported kernel gives the reference's bits: sizes around each
// kernel's tile (1-8 rows), its transposed groups (up to 8 or 16 rows, 4 or
// 8 at a time), the one-panel packed path past them (up to 128 rows) and the
// slab path past that, panel (8, 24 or 48 columns; a last partial one) and
// 16 x 16 or 8 x 8 packing blocks (K tails), one K block exactly and several
// with a short last one.
TEST_F(CpuGemmTest, EveryKernelSumsInTheDocumentedOrder) {
  TRACE_SEED;
  const int64_t sizes[][3] = {{1, 1, 1},    {1, 7, 3},    {2, 48, 17},    {3, 13, 64},  {4, 24, 100},
                              {5, 97, 31},  {7, 49, 256}, {8, 50, 257},   {9, 61, 513}, {1, 145, 1024 + 5},
                              {13, 9, 775}, {17, 96, 40}, {20, 401, 33}, {16, 33, 300}, {24, 47, 260},
                              {31, 18, 129}, {32, 65, 519}, {33, 20, 70}, {40, 97, 300}, {64, 48, 513},
                              {65, 50, 257}, {127, 61, 33}, {128, 145, 260}, {129, 49, 300}, {200, 100, 17}};
  CpuGemmThreads threads(3);
  for (CpuGemmKernel kernel : SupportedKernels()) {
    for (const auto& s : sizes) {
      const int64_t M = s[0], N = s[1], K = s[2];
      const auto x = RandomFloats(rng_, M * K), w = RandomFloats(rng_, N * K), bias = RandomFloats(rng_, N);
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << CpuGemmKernelName(kernel) << " M=" << M << " N=" << N << " K=" << K
                                          << " bias=" << with_bias);
        const float* b = with_bias ? bias.data() : nullptr;
        const std::vector<float> want = Reference(x, w, b, M, N, K);
        std::vector<float> y(static_cast<size_t>(M * N), 123.f);  // not zeros: the GEMM overwrites
        CpuGemmWith(kernel, x.data(), w.data(), b, y.data(), M, N, K);
        const int64_t at = FirstBitDifference(y.data(), want.data(), M * N);
        EXPECT_EQ(at, -1) << "element " << at << ": got " << y[at] << ", the order gives " << want[at];
        std::vector<float> yt(static_cast<size_t>(M * N), -7.f);
        CpuGemmWith(kernel, x.data(), w.data(), b, yt.data(), M, N, K, &threads);
        EXPECT_EQ(FirstBitDifference(yt.data(), want.data(), M * N), -1) << "on 3 threads";
      }
    }
  }
}

// Large enough to be split among the threads (cpu_gemm.cc's kParallelWork),
// with column counts that leave a ragged last chunk, few rows (one-panel
// chunks) and many (chunks of several panels).
TEST_F(CpuGemmTest, ThreadsSplitColumnsWithoutChangingABit) {
  TRACE_SEED;
  const int64_t shapes[][3] = {{6, 25, 1100}, {6, 97, 1100}, {6, 301, 1100}, {40, 1000, 300}, {130, 500, 260}};
  for (const auto& shape : shapes) {
    const int64_t M = shape[0], N = shape[1], K = shape[2];
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
    const auto x = RandomFloats(rng_, M * K), w = RandomFloats(rng_, N * K), bias = RandomFloats(rng_, N);
    const std::vector<float> want = Reference(x, w, bias.data(), M, N, K);
    for (int t : {1, 2, 3, 5}) {
      CpuGemmThreads threads(t);
      for (int repeat = 0; repeat < 3; ++repeat) {  // the pool is reused call after call
        std::vector<float> y(static_cast<size_t>(M * N));
        CpuGemm(x.data(), w.data(), bias.data(), y.data(), M, N, K, &threads);
        ASSERT_EQ(FirstBitDifference(y.data(), want.data(), M * N), -1) << t << " threads, call " << repeat;
      }
    }
  }
}

// The pool hands a task to the caller and to whichever workers wake in time,
// call after call (a fresh queue on the caller's stack each time: a worker
// that touched it after Run returned would be a use after scope under ASan).
TEST(CpuGemmThreadsTest, EveryItemOfASharedQueueIsTakenOnceRunAfterRun) {
  for (int threads : {1, 2, 4}) {
    CpuGemmThreads pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int round = 0; round < 2000; ++round) {
      struct Queue {
        int size;
        std::atomic<int> next{0};
        std::vector<std::atomic<int>> taken;
        explicit Queue(int n) : size(n), taken(static_cast<size_t>(n)) {}
      } queue(1 + round % 9);
      pool.Run(
          [](void* ctx) {
            Queue& q = *static_cast<Queue*>(ctx);
            for (int i = q.next++; i < q.size; i = q.next++) q.taken[static_cast<size_t>(i)]++;
          },
          &queue);
      for (int i = 0; i < queue.size; ++i) {
        ASSERT_EQ(queue.taken[static_cast<size_t>(i)].load(), 1) << threads << " threads, round " << round;
      }
    }
  }
}

// Batch invariance itself: each row computed alone has the bits it has in
// every batch of 2 to 160 rows (every path: transposed groups up to 16, one
// panel up to 128, slabs past it), at every position, for every kernel. N
// holds a whole panel of every kernel and a partial one.
TEST_F(CpuGemmTest, ARowHasTheSameBitsAloneAndInAnyBatch) {
  TRACE_SEED;
  constexpr int64_t kMaxM = 160, N = 61;
  CpuGemmThreads threads(2);
  for (CpuGemmKernel kernel : SupportedKernels()) {
    for (const int64_t K : {7, 64, 1031}) {
      SCOPED_TRACE(::testing::Message() << CpuGemmKernelName(kernel) << " K=" << K);
      const auto x = RandomFloats(rng_, kMaxM * K), w = RandomFloats(rng_, N * K), bias = RandomFloats(rng_, N);
      std::vector<float> alone(static_cast<size_t>(kMaxM * N));
      for (int64_t r = 0; r < kMaxM; ++r) {
        CpuGemmWith(kernel, &x[r * K], w.data(), bias.data(), &alone[r * N], 1, N, K);
      }
      std::uniform_int_distribution<int64_t> pick(0, kMaxM - 1);
      for (int64_t M = 2; M <= kMaxM; ++M) {
        // M rows drawn from the kMaxM, in a random order (repeats allowed).
        std::vector<int64_t> rows(static_cast<size_t>(M));
        for (int64_t& r : rows) r = pick(rng_);
        std::vector<float> batch(static_cast<size_t>(M * K));
        for (int64_t i = 0; i < M; ++i) std::memcpy(&batch[i * K], &x[rows[i] * K], K * sizeof(float));
        std::vector<float> y(static_cast<size_t>(M * N));
        CpuGemmWith(kernel, batch.data(), w.data(), bias.data(), y.data(), M, N, K, &threads);
        for (int64_t i = 0; i < M; ++i) {
          ASSERT_EQ(FirstBitDifference(&y[i * N], &alone[rows[i] * N], N), -1)
              << "M=" << M << ": row " << i << " (x row " << rows[i] << ") differs from the row alone";
        }
      }
    }
  }
}

// Plain accuracy against double precision (chains of at most kCpuGemmBlockK
// terms, then K / kCpuGemmBlockK block sums).
TEST_F(CpuGemmTest, EveryKernelIsCloseToTheExactProduct) {
  TRACE_SEED;
  const int64_t M = 3, N = 11, K = 4099;
  const auto x = RandomFloats(rng_, M * K), w = RandomFloats(rng_, N * K);
  std::vector<double> exact(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double{x[m * K + k]} * w[n * K + k];
      exact[m * N + n] = s;
    }
  }
  for (CpuGemmKernel kernel : SupportedKernels()) {
    std::vector<float> y(static_cast<size_t>(M * N));
    CpuGemmWith(kernel, x.data(), w.data(), nullptr, y.data(), M, N, K);
    testing::ExpectRelL2(y, exact, CpuGemmKernelName(kernel), 1e-6);
  }
}

}  // namespace
}  // namespace tpserve
