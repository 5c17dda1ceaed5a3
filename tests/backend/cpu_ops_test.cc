// The CPU backend's ops against naive double-precision loops written here,
// independently of backend/cpu_ops.cc, on odd sizes and fresh seeded inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cpu_gemm.h"
#include "tests/backend/cpu_test_util.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

using testing::Download;
using testing::ExpectClose;
using testing::ExpectRelL2;
using testing::RandomFloats;
using testing::Upload;

class CpuOpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = MakeCpuBackend(2);
  uint64_t seed_ = testing_util::TestSeed();
  std::mt19937_64 rng_{seed_};
};
#define TRACE_SEED SCOPED_TRACE(::testing::Message() << "seed " << seed_)

// Naive references (double precision).
std::vector<double> RefLinear(const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>* bias, int64_t M, int64_t N, int64_t K) {
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? (*bias)[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += double{x[m * K + k]} * w[n * K + k];
      y[m * N + n] = s;
    }
  }
  return y;
}

std::vector<double> RefRmsNorm(const std::vector<double>& x, const std::vector<float>& w,
                               double eps, int64_t M, int64_t D) {
  std::vector<double> out(x.size());
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += x[m * D + i] * x[m * D + i];
    const double inv = 1.0 / std::sqrt(ss / D + eps);
    for (int64_t i = 0; i < D; ++i) out[m * D + i] = x[m * D + i] * inv * w[i];
  }
  return out;
}

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST_F(CpuOpsTest, BackendIdentity) {
  EXPECT_EQ(backend_->name(), "cpu");
  EXPECT_EQ(backend_->device(), Device::kCpu);
  EXPECT_EQ(backend_->compute_dtype(), DType::kF32);
}

TEST_F(CpuOpsTest, AllocateIsAlignedZeroedAndShaped) {
  for (int64_t n : {1, 3, 7, 19, 111, 4097}) {
    Buffer b = backend_->Allocate(DType::kF32, {n, 3});
    const Tensor& t = b.tensor();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u);
    EXPECT_EQ(t.ndim, 2);
    EXPECT_EQ(t.dim(0), n);
    EXPECT_EQ(t.dim(1), 3);
    EXPECT_EQ(t.device, Device::kCpu);
    for (float v : Download(*backend_, t)) ASSERT_EQ(v, 0.f);
  }
  Buffer half = backend_->Allocate(DType::kBF16, {7, 1, 3});
  EXPECT_EQ(half.tensor().nbytes(), 42u);
}

TEST_F(CpuOpsTest, EmbeddingMasksIdsOutsideTheShard) {
  TRACE_SEED;
  for (int64_t D : {1, 3, 19, 111}) {
    const int64_t Vs = 19, vocab_start = 37;
    std::vector<int32_t> ids = {0, 36, 37, 55, 56, 1000};  // edges of the shard [37, 56)
    std::uniform_int_distribution<int32_t> id_dist(0, 100);
    for (int i = 0; i < 13; ++i) ids.push_back(id_dist(rng_));
    const auto T = static_cast<int32_t>(ids.size());
    auto step = testing::PrefillStep(ids, {T}, {0}, 16, 2);
    ASSERT_TRUE(backend_->BeginStep(step.view(), 4, 16, 64).ok());
    const std::vector<float> table = RandomFloats(rng_, Vs * D);
    Buffer t = Upload(*backend_, table, {Vs, D});
    Buffer out = backend_->Allocate(DType::kF32, {T, D});
    backend_->CopyFromHost(RandomFloats(rng_, T * D).data(), DType::kF32, out);  // not zeros
    backend_->Embedding(t, vocab_start, out);
    std::vector<double> ref(static_cast<size_t>(T * D), 0.0);
    for (int32_t i = 0; i < T; ++i) {
      const int64_t row = ids[i] - vocab_start;
      if (row < 0 || row >= Vs) continue;
      for (int64_t d = 0; d < D; ++d) ref[i * D + d] = table[row * D + d];
    }
    ExpectClose(Download(*backend_, out), ref, "embedding D=" + std::to_string(D), 0, 0);
  }
}

TEST_F(CpuOpsTest, LinearMatchesNaiveLoopWithAndWithoutBias) {
  TRACE_SEED;
  const int64_t sizes[][3] = {{1, 1, 1},   {1, 3, 7},    {3, 7, 19},  {7, 19, 111},
                              {19, 111, 7}, {1, 4097, 111}, {5, 19, 4097}, {111, 33, 1024}};
  for (const auto& s : sizes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K
                                        << " bias=" << with_bias);
      const auto x = RandomFloats(rng_, M * K), w = RandomFloats(rng_, N * K);
      const auto bias = RandomFloats(rng_, N);
      Buffer xb = Upload(*backend_, x, {M, K}), wb = Upload(*backend_, w, {N, K});
      Buffer bb = Upload(*backend_, bias, {N});
      Buffer yb = backend_->Allocate(DType::kF32, {M, N});
      backend_->Linear(xb, wb, with_bias ? &bb.tensor() : nullptr, yb);
      const auto ref = RefLinear(x, w, with_bias ? &bias : nullptr, M, N, K);
      ExpectRelL2(Download(*backend_, yb), ref, "Linear");
    }
  }
}

// Batch invariance through the backend's Linear (tests/backend/cpu_gemm_test.cc
// holds the GEMM itself to its summation order): a row's result is bitwise the
// same whatever M is and wherever the row sits, for K below, at and past a
// K block and with a tail the vector loop does not cover, on the backend's
// two threads.
TEST_F(CpuOpsTest, LinearGivesEachRowTheSameBitsWhateverTheBatch) {
  TRACE_SEED;
  for (const int64_t K : {7, 64, 1024, 1031}) {
    const int64_t N = 97, kMaxM = 13;
    const auto x = RandomFloats(rng_, kMaxM * K), w = RandomFloats(rng_, N * K), bias = RandomFloats(rng_, N);
    Buffer wb = Upload(*backend_, w, {N, K}), bb = Upload(*backend_, bias, {N});
    // Row r of x alone: the reference bits.
    std::vector<std::vector<float>> alone(kMaxM);
    for (int64_t r = 0; r < kMaxM; ++r) {
      Buffer xb = Upload(*backend_, std::vector<float>(x.begin() + r * K, x.begin() + (r + 1) * K), {1, K});
      Buffer yb = backend_->Allocate(DType::kF32, {1, N});
      backend_->Linear(xb, wb, &bb.tensor(), yb);
      alone[static_cast<size_t>(r)] = Download(*backend_, yb);
    }
    for (const int64_t M : {2, 3, 4, 5, 8, 9, 13}) {
      SCOPED_TRACE(::testing::Message() << "K=" << K << " M=" << M);
      Buffer xb = Upload(*backend_, std::vector<float>(x.begin(), x.begin() + M * K), {M, K});
      Buffer yb = backend_->Allocate(DType::kF32, {M, N});
      backend_->Linear(xb, wb, &bb.tensor(), yb);
      const std::vector<float> y = Download(*backend_, yb);
      for (int64_t r = 0; r < M; ++r) {
        const std::vector<float> row(y.begin() + r * N, y.begin() + (r + 1) * N);
        ASSERT_EQ(0, std::memcmp(row.data(), alone[static_cast<size_t>(r)].data(), N * sizeof(float)))
            << "row " << r << " differs from the same row computed alone";
      }
    }
  }
}

TEST_F(CpuOpsTest, LinearAcceptsRowsOfAWiderTensor) {
  TRACE_SEED;
  const int64_t M = 7, N = 3, K = 19;
  const auto x = RandomFloats(rng_, M * K), w = RandomFloats(rng_, N * K);
  Buffer xb = Upload(*backend_, x, {M, K}), wb = Upload(*backend_, w, {N, K});
  Buffer yb = backend_->Allocate(DType::kF32, {M, N});
  backend_->Linear(xb.tensor().Rows(2, 3), wb, nullptr, yb.tensor().Rows(0, 3));
  const std::vector<float> x_rows(x.begin() + 2 * K, x.begin() + 5 * K);
  const auto ref = RefLinear(x_rows, w, nullptr, 3, N, K);
  const auto got = Download(*backend_, yb);
  ExpectRelL2(std::vector<float>(got.begin(), got.begin() + 3 * N), ref, "Linear rows");
}

TEST_F(CpuOpsTest, RmsNormMatchesNaiveLoop) {
  TRACE_SEED;
  for (int64_t M : {1, 3, 7}) {
    for (int64_t D : {1, 3, 19, 111, 4097}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " D=" << D);
      const auto x = RandomFloats(rng_, M * D, -3, 3), w = RandomFloats(rng_, D, 0.5, 1.5);
      const float eps = 1e-6f;
      Buffer xb = Upload(*backend_, x, {M, D}), wb = Upload(*backend_, w, {D});
      Buffer out = backend_->Allocate(DType::kF32, {M, D});
      backend_->RmsNorm(xb, wb, eps, out);
      const auto ref = RefRmsNorm(ToDouble(x), w, eps, M, D);
      ExpectClose(Download(*backend_, out), ref, "RmsNorm");
      backend_->RmsNorm(xb, wb, eps, xb);  // in place
      ExpectClose(Download(*backend_, xb), ref, "RmsNorm in place");
    }
  }
}

TEST_F(CpuOpsTest, AddRmsNormUpdatesResidualAndNormalises) {
  TRACE_SEED;
  for (int64_t M : {1, 3, 19}) {
    for (int64_t D : {1, 7, 111, 4097}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " D=" << D);
      const auto x = RandomFloats(rng_, M * D), r = RandomFloats(rng_, M * D, -2, 2);
      const auto w = RandomFloats(rng_, D, 0.5, 1.5);
      const float eps = 1e-5f;
      Buffer xb = Upload(*backend_, x, {M, D}), rb = Upload(*backend_, r, {M, D});
      Buffer wb = Upload(*backend_, w, {D});
      backend_->AddRmsNorm(xb, rb, wb, eps);
      std::vector<double> sum(x.size());
      for (size_t i = 0; i < x.size(); ++i) sum[i] = double{x[i]} + r[i];
      ExpectClose(Download(*backend_, rb), sum, "residual");
      ExpectClose(Download(*backend_, xb), RefRmsNorm(sum, w, eps, M, D), "normalised x");
    }
  }
}

// RoPE table from theta as backend.h lays it out: row p = [cos(p f_i) | sin(p f_i)].
std::vector<float> RopeTable(double theta, int64_t max_position, int64_t hd) {
  std::vector<float> table(static_cast<size_t>(max_position * hd));
  for (int64_t p = 0; p < max_position; ++p) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double angle = p * std::pow(theta, -2.0 * i / hd);
      table[p * hd + i] = static_cast<float>(std::cos(angle));
      table[p * hd + hd / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

TEST_F(CpuOpsTest, QkNormRopeMatchesNaiveLoop) {
  TRACE_SEED;
  const double theta = 1e6;
  const int64_t max_position = 2048;
  struct Case { int32_t hq, hkv, hd; };
  for (const Case c : {Case{7, 1, 64}, Case{3, 3, 128}, Case{9, 3, 64}, Case{1, 1, 128}}) {
    for (bool norm : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "Hq=" << c.hq << " Hkv=" << c.hkv << " hd=" << c.hd
                                        << " norm=" << norm);
      const AttentionShape shape{c.hq, c.hkv, c.hd};
      // A prefill of 5 tokens after 1500 cached, then one of 2 from scratch.
      std::vector<int32_t> ids(7, 1);
      auto step = testing::PrefillStep(ids, {5, 2}, {1500, 0}, 16, 100);
      ASSERT_TRUE(backend_->BeginStep(step.view(), 200, 16, max_position).ok());
      const int64_t T = 7, W = shape.qkv_width(), hd = c.hd, half = hd / 2;
      const auto qkv = RandomFloats(rng_, T * W, -2, 2);
      const auto qn = RandomFloats(rng_, hd, 0.5, 1.5), kn = RandomFloats(rng_, hd, 0.5, 1.5);
      const float eps = 1e-6f;
      Buffer qkvb = Upload(*backend_, qkv, {T, W});
      Buffer qnb = Upload(*backend_, qn, {hd}), knb = Upload(*backend_, kn, {hd});
      Buffer rope = Upload(*backend_, RopeTable(theta, max_position, hd), {max_position, hd});
      backend_->QkNormRope(qkvb, shape, norm ? &qnb.tensor() : nullptr,
                           norm ? &knb.tensor() : nullptr, eps, rope);
      std::vector<double> ref = ToDouble(qkv);
      for (int64_t t = 0; t < T; ++t) {
        const double p = step.arrays().positions[t];
        for (int64_t h = 0; h < c.hq + c.hkv; ++h) {
          double* x = ref.data() + t * W + h * hd;
          if (norm) {
            double ss = 0;
            for (int64_t i = 0; i < hd; ++i) ss += x[i] * x[i];
            const double inv = 1.0 / std::sqrt(ss / hd + eps);
            const auto& g = h < c.hq ? qn : kn;
            for (int64_t i = 0; i < hd; ++i) x[i] *= inv * g[i];
          }
          for (int64_t i = 0; i < half; ++i) {
            const double f = p * std::pow(theta, -2.0 * i / hd);
            const double a = x[i], b = x[i + half];
            x[i] = a * std::cos(f) - b * std::sin(f);
            x[i + half] = b * std::cos(f) + a * std::sin(f);
          }
        }
      }
      ExpectClose(Download(*backend_, qkvb), ref, "qkv");  // v must be untouched: exact match
    }
  }
}

TEST_F(CpuOpsTest, SiluMulMatchesNaiveLoop) {
  TRACE_SEED;
  for (int64_t M : {1, 3, 7}) {
    for (int64_t F : {1, 19, 111, 4097}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " F=" << F);
      const auto gu = RandomFloats(rng_, M * 2 * F, -12, 12);
      Buffer gub = Upload(*backend_, gu, {M, 2 * F});
      Buffer out = backend_->Allocate(DType::kF32, {M, F});
      backend_->SiluMul(gub, out);
      std::vector<double> ref(static_cast<size_t>(M * F));
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t i = 0; i < F; ++i) {
          const double g = gu[m * 2 * F + i], u = gu[m * 2 * F + F + i];
          ref[m * F + i] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      ExpectClose(Download(*backend_, out), ref, "SiluMul");
    }
  }
}

TEST_F(CpuOpsTest, GatherRowsPicksTheLogitsRows) {
  TRACE_SEED;
  for (int64_t D : {1, 19, 4097}) {
    std::vector<int32_t> ids(11, 3);
    auto step = testing::PrefillStep(ids, {4, 1, 6}, {0, 2, 5}, 8, 2);
    step.mutable_arrays().logits_indices = {1, 4, 10};  // any row of each sequence, not only the last
    ASSERT_TRUE(backend_->BeginStep(step.view(), 6, 8, 32).ok());
    const auto x = RandomFloats(rng_, 11 * D);
    Buffer xb = Upload(*backend_, x, {11, D});
    Buffer out = backend_->Allocate(DType::kF32, {3, D});
    backend_->GatherRows(xb, out);
    std::vector<double> ref;
    for (int32_t row : {1, 4, 10}) ref.insert(ref.end(), x.begin() + row * D, x.begin() + (row + 1) * D);
    ExpectClose(Download(*backend_, out), ref, "GatherRows", 0, 0);
  }
}

// bf16 and f16 decoded by hand from their bit layouts.
double DecodeBf16(uint16_t bits) {
  const uint32_t u = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double DecodeF16(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double v;
  if (exponent == 0) {
    v = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    v = mantissa ? NAN : INFINITY;
  } else {
    v = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return sign ? -v : v;
}

TEST_F(CpuOpsTest, CopyFromHostConvertsEachDtype) {
  TRACE_SEED;
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  for (int64_t n : {1, 3, 111, 4097}) {
    std::vector<uint16_t> raw(static_cast<size_t>(n));
    for (auto& b : raw) {
      do b = static_cast<uint16_t>(bits(rng_));
      while ((b & 0x7c00) == 0x7c00 || (b & 0x7f80) == 0x7f80);  // no inf / NaN in either type
    }
    for (DType src : {DType::kBF16, DType::kF16}) {
      Buffer dst = backend_->Allocate(DType::kF32, {n});
      backend_->CopyFromHost(raw.data(), src, dst);
      std::vector<double> ref;
      for (uint16_t b : raw) ref.push_back(src == DType::kBF16 ? DecodeBf16(b) : DecodeF16(b));
      ExpectClose(Download(*backend_, dst), ref, std::string(DTypeName(src)), 0, 0);
    }
    const auto f = RandomFloats(rng_, n, -1e3, 1e3);
    Buffer dst = backend_->Allocate(DType::kF32, {n});
    backend_->CopyFromHost(f.data(), DType::kF32, dst);
    ExpectClose(Download(*backend_, dst), ToDouble(f), "F32", 0, 0);
    // A bf16 tensor on the backend reads back as the value it holds.
    Buffer half = backend_->Allocate(DType::kBF16, {n});
    backend_->CopyFromHost(raw.data(), DType::kBF16, half);
    std::vector<double> ref;
    for (uint16_t b : raw) ref.push_back(DecodeBf16(b));
    ExpectClose(Download(*backend_, half), ref, "bf16 tensor to host", 0, 0);
  }
}

TEST_F(CpuOpsTest, CopyDuplicatesATensor) {
  TRACE_SEED;
  const auto x = RandomFloats(rng_, 3 * 111);
  Buffer a = Upload(*backend_, x, {3, 111});
  Buffer b = backend_->Allocate(DType::kF32, {3, 111});
  backend_->Copy(a, b);
  ExpectClose(Download(*backend_, b), ToDouble(x), "Copy", 0, 0);
}

TEST_F(CpuOpsTest, ShapeMismatchAndMissingStepAbortWithTheOpName) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  Buffer x = backend_->Allocate(DType::kF32, {3, 7});
  Buffer w = backend_->Allocate(DType::kF32, {5, 8});
  Buffer y = backend_->Allocate(DType::kF32, {3, 5});
  EXPECT_DEATH(backend_->Linear(x, w, nullptr, y), "Linear: w is \\[5, 8\\], expected \\[5, 7\\]");
  auto fresh = MakeCpuBackend();
  Buffer out = fresh->Allocate(DType::kF32, {1, 7});
  EXPECT_DEATH(fresh->GatherRows(x, out), "GatherRows: no current step: call BeginStep first");
}

}  // namespace
}  // namespace tpserve
