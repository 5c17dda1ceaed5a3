// The small-batch path of the CUDA backend against the CPU backend (the fp32
// oracle) and against the reference kernel set (cuBLAS and the scalar
// kernels): the bf16 GEMV that Linear runs for M <= 8 (cuda/gemv.cuh) and
// its SiLU-and-mul twin behind LinearSiluMul, the vector RmsNorm / AddRmsNorm
// (cuda/rmsnorm.cuh), their programmatic (PDL) launches, and BeginStep's upload of
// the used block-table columns only (cuda/step_layout.h), whose stale columns
// no kernel may read. Odd sizes, NaN-poisoned outputs.
// Replay a failure with TPSERVE_TEST_SEED=<the printed seed>.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"
#include "cuda/gemv.cuh"
#include "cuda/silu_mul.cuh"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_sizes.h"
#if defined(TPSERVE_CUDA_EMU)
#include "cuda/emu/simt.h"
#endif

namespace tpserve {
namespace {

using cuda_test::Download;
using cuda_test::ExpectWithinBound;
using cuda_test::Gamma;
using cuda_test::kBf16Unit;
using cuda_test::kF32Unit;
using cuda_test::Output;
using cuda_test::RandomBf16;
using cuda_test::RandomStep;
using cuda_test::SeqPart;
using cuda_test::Upload;

// The tolerances below are derived (cuda_test_util.h, "Tolerances derived
// from the arithmetic"): each op's exact value in double on the host, and per
// element the bound of each implementation's error against it, from the
// roundings it makes. u = 2^-8 (bf16), γ_n (fp32 sums), 2^-23 per fp32 op.
// A comparison of A with B allows bound_A + bound_B.

// The exact value of an op and the bounds of the GPU's bf16 kernels (fast and
// reference sets alike: the same roundings in another order) and of the CPU
// backend's fp32 code against it, per element.
struct Bounded {
  std::vector<double> exact, gpu, cpu;
  std::vector<double> Sum(const std::vector<double>& a, const std::vector<double>& b) const {
    std::vector<double> s(a.size());
    for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
    return s;
  }
  std::vector<double> GpuVsCpu() const { return Sum(gpu, cpu); }
  std::vector<double> GpuVsGpu() const { return Sum(gpu, gpu); }
};

// Linear y = x·wᵀ (+ bias), K = k: products of bf16 values are exact in fp32
// and their fp32 sum (bias included: k + 1 terms) is within γ_{k+1}·Σ|terms| of
// the exact S; the GPU then rounds once to bf16 (u·|S| more). The CPU keeps fp32.
//   gpu: u·|S| + (1 + u)·γ_{k+1}·A        cpu: γ_{k+1}·A        (A = Σ|x·w| + |bias|)
Bounded LinearBounds(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int64_t m,
                     int64_t k, int64_t n) {
  const cuda_test::HostDots d = cuda_test::Dots(x, w, bias, m, k, n);
  Bounded b{d.sum, d.sum, d.sum};
  const double g = Gamma(k + 1);
  for (size_t i = 0; i < d.sum.size(); ++i) {
    b.gpu[i] = kBf16Unit * std::abs(d.sum[i]) + (1 + kBf16Unit) * g * d.abs[i];
    b.cpu[i] = g * d.abs[i];
  }
  return b;
}

// The reference set's Linear with a bias: cuBLAS's product rounded to bf16,
// then the bias added in fp32 (one op) and rounded to bf16 again.
//   e0 = u·|S0| + (1 + u)·γ_k·A0 (the product, as above), then (u + 2·2^-23)·(|S| + e0) more.
std::vector<double> ReferenceBiasBound(const std::vector<float>& x, const std::vector<float>& w,
                                       const std::vector<float>& bias, int64_t m, int64_t k, int64_t n) {
  const cuda_test::HostDots product = cuda_test::Dots(x, w, nullptr, m, k, n);
  const cuda_test::HostDots with = cuda_test::Dots(x, w, bias.data(), m, k, n);
  std::vector<double> bound(product.sum.size());
  for (size_t i = 0; i < bound.size(); ++i) {
    const double e0 = kBf16Unit * std::abs(product.sum[i]) + (1 + kBf16Unit) * Gamma(k) * product.abs[i];
    bound[i] = e0 + (kBf16Unit + 2 * kF32Unit) * (std::abs(with.sum[i]) + e0);
  }
  return bound;
}

double Silu(double g) { return g / (1 + std::exp(-g)); }

// LinearSiluMul out[i, f] = silu(G)·V with G, V the gate (row f of w) and up
// (row F + f) products. Each implementation computes g, v within dg, dv of G, V
// (the GPU: Linear's bound, its bf16 rounding included; the CPU: γ_k·A), so
// since silu is 1.1-Lipschitz (silu' lies in [-0.1, 1.1]),
//   |silu(g)·v − silu(G)·V| <= 1.1·dg·(|V| + dv) + |silu(G)|·dv  =: spread,
// then silu and the product in fp32 (exp within 2 + 1.2·|g| ulp for CUDA's
// __expf, 1 for the host's; 1 + e, the division and 2 products: one ulp each)
// and, on the GPU, one bf16 rounding of the result.
Bounded LinearSiluMulBounds(const std::vector<float>& x, const std::vector<float>& w, int64_t m, int64_t k,
                            int64_t f) {
  const cuda_test::HostDots d = cuda_test::Dots(x, w, nullptr, m, k, 2 * f);
  Bounded b;
  const double u = kBf16Unit, g_k = Gamma(k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const size_t gi = static_cast<size_t>(i * 2 * f + j), vi = gi + static_cast<size_t>(f);
      const double G = d.sum[gi], V = d.sum[vi], exact = Silu(G) * V;
      auto spread = [&](double dg, double dv) { return 1.1 * dg * (std::abs(V) + dv) + std::abs(Silu(G)) * dv; };
      const double dg_gpu = u * std::abs(G) + (1 + u) * g_k * d.abs[gi];
      const double dv_gpu = u * std::abs(V) + (1 + u) * g_k * d.abs[vi];
      const double s_gpu = spread(dg_gpu, dv_gpu), p_gpu = std::abs(exact) + s_gpu;
      const double ops_gpu = (6 + 1.2 * (std::abs(G) + dg_gpu)) * kF32Unit;
      const double s_cpu = spread(g_k * d.abs[gi], g_k * d.abs[vi]), p_cpu = std::abs(exact) + s_cpu;
      b.exact.push_back(exact);
      b.gpu.push_back(s_gpu + ops_gpu * p_gpu + u * (1 + ops_gpu) * p_gpu);
      b.cpu.push_back(s_cpu + 5 * kF32Unit * p_cpu);
    }
  }
  return b;
}

// RmsNorm y = x·w / sqrt(Σx²/D + eps): the squares of bf16 values are exact in
// fp32 and positive, so the mean (D − 1 additions, the division, + eps) is
// within γ_{D+1} of itself relatively; the root halves that; rsqrtf adds 2 ulp
// (the CPU's 1/sqrt: 2 ops), the two products one each. The GPU rounds to bf16.
//   rho = γ_{D+2}/2 + 5·2^-23        gpu: (u + (1 + u)·rho)·|Y|        cpu: rho·|Y|
double RmsNormRho(int64_t d) { return Gamma(d + 2) / 2 + 5 * kF32Unit; }

// The exact RmsNorm of rows of x (any values), in double.
std::vector<double> HostRmsNorm(const std::vector<double>& x, const std::vector<float>& w, int64_t m, int64_t d,
                                double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t l = 0; l < d; ++l) ss += x[i * d + l] * x[i * d + l];
    const double inv = 1 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t l = 0; l < d; ++l) y[i * d + l] = x[i * d + l] * inv * w[l];
  }
  return y;
}

Bounded RmsNormBounds(const std::vector<float>& x, const std::vector<float>& w, int64_t m, int64_t d, double eps) {
  Bounded b;
  b.exact = HostRmsNorm(std::vector<double>(x.begin(), x.end()), w, m, d, eps);
  const double rho = RmsNormRho(d);
  for (double y : b.exact) {
    b.gpu.push_back((kBf16Unit + (1 + kBf16Unit) * rho) * std::abs(y));
    b.cpu.push_back(rho * std::abs(y));
  }
  return b;
}

// AddRmsNorm: the residual R = x + r (one fp32 add, exact or within 2^-23; the
// GPU rounds it to bf16: R' within eps_r = u + 2·2^-23 of R), then RmsNorm of
// it. Normalizing R' instead of R moves the result by at most (2·eps_r +
// 4·eps_r²)·|Y| (R' per element within eps_r, its root mean square too), then
// the normalization's own error as RmsNorm's, of |Y'| <= (1 + 2·eps_r + 4·eps_r²)·|Y|.
// The CPU's fp32 residual: the same with eps_r = 2^-23, no bf16 rounding.
struct AddRmsNormBounded {
  Bounded residual, normed;
  std::vector<double> normed_of_rounded;  // the exact RmsNorm of the GPU's bf16 residual R'
};
AddRmsNormBounded AddRmsNormBounds(const std::vector<float>& x, const std::vector<float>& r,
                                   const std::vector<float>& w, int64_t m, int64_t d, double eps) {
  AddRmsNormBounded b;
  std::vector<double> sum(x.size()), rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    sum[i] = double{x[i]} + r[i];
    rounded[i] = Bf16ToFloat(FloatToBf16(x[i] + r[i]));  // fp32 add, then bf16: as the kernels do
  }
  const double u = kBf16Unit, rho = RmsNormRho(d);
  const double er_gpu = u + 2 * kF32Unit, er_cpu = kF32Unit;
  b.residual.exact = sum;
  for (double v : sum) {
    b.residual.gpu.push_back(er_gpu * std::abs(v));
    b.residual.cpu.push_back(er_cpu * std::abs(v));
  }
  b.normed.exact = HostRmsNorm(sum, w, m, d, eps);
  b.normed_of_rounded = HostRmsNorm(rounded, w, m, d, eps);
  auto moved = [](double e) { return 2 * e + 4 * e * e; };
  for (double y : b.normed.exact) {
    const double a = std::abs(y);
    b.normed.gpu.push_back(moved(er_gpu) * a + (u + (1 + u) * rho) * (1 + moved(er_gpu)) * a);
    b.normed.cpu.push_back(moved(er_cpu) * a + rho * (1 + moved(er_cpu)) * a);
  }
  return b;
}

// K and N: an odd multiple of 8 past one chunk per lane of every warp
// (GPU: 513 chunks; emulated: 41, past one warp's 32 lanes).
constexpr int64_t kLargeK = cuda_test::kEmulated ? 8 * 41 : 8 * 513;
// K past the 4 weight vectors each lane of the GEMV loads at once (the first
// of them before a programmatic launch's wait) under the widest K split
// (8 warps · 32 lanes · 4 = 1,024 chunks), so every lane goes round its loop.
constexpr int64_t kLoopK = 8 * 1033;

class SmallBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
    seed_ = cuda_test::TestSeed();
    rng_.seed(seed_);
    fast_ = MakeCudaBackend(0, cuda::KernelSet::kFast);
    ref_ = MakeCudaBackend(0, cuda::KernelSet::kReference);
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<Backend> cpu_ = MakeCpuBackend();
  std::unique_ptr<Backend> fast_, ref_;
};

#define SEED_TRACE() SCOPED_TRACE(::testing::Message() << "TPSERVE_TEST_SEED=" << seed_)

std::string Shape(int64_t m, int64_t k, int64_t n, bool bias) {
  return "M=" + std::to_string(m) + " K=" + std::to_string(k) + " N=" + std::to_string(n) +
         (bias ? " bias" : " no bias");
}

// Linear through the backend: M 1..8 takes the GEMV, M = 9 falls back to
// cuBLAS; both against the CPU backend and the reference set's cuBLAS.
TEST_F(SmallBatchTest, LinearAtMUpTo9MatchesCpuAndCublas) {
  SEED_TRACE();
  for (int64_t m = 1; m <= 9; ++m) {
    for (int64_t k : {int64_t{8}, int64_t{24}, kLargeK}) {
      for (int64_t n : {int64_t{1}, int64_t{19}, cuda_test::kLargeDim}) {
        const std::vector<float> x = RandomBf16(rng_, m * k), w = RandomBf16(rng_, n * k, 0.1f),
                                 bias = RandomBf16(rng_, n);
        Buffer xc = Upload(*cpu_, x, {m, k}), xf = Upload(*fast_, x, {m, k}), xr = Upload(*ref_, x, {m, k});
        Buffer wc = Upload(*cpu_, w, {n, k}), wf = Upload(*fast_, w, {n, k}), wr = Upload(*ref_, w, {n, k});
        Buffer bc = Upload(*cpu_, bias, {n}), bf = Upload(*fast_, bias, {n}), br = Upload(*ref_, bias, {n});
        // Both with and without bias at the edges of M; alternating between.
        for (bool with_bias : {false, true}) {
          if (m != 1 && m != 8 && with_bias != ((m + n) % 2 == 1)) continue;
          Buffer yc = Output(*cpu_, {m, n}), yf = Output(*fast_, {m, n}), yr = Output(*ref_, {m, n});
          cpu_->Linear(xc, wc, with_bias ? &bc.tensor() : nullptr, yc.tensor());
          fast_->Linear(xf, wf, with_bias ? &bf.tensor() : nullptr, yf.tensor());
          ref_->Linear(xr, wr, with_bias ? &br.tensor() : nullptr, yr.tensor());
          const std::vector<float> got = Download(*fast_, yf);
          const Bounded b = LinearBounds(x, w, with_bias ? bias.data() : nullptr, m, k, n);
          ExpectWithinBound(got, Download(*cpu_, yc), b.GpuVsCpu(), "vs CPU " + Shape(m, k, n, with_bias));
          // The reference adds the bias to cuBLAS's rounded output and rounds
          // again: its bound has a second rounding (ReferenceBiasBound).
          ExpectWithinBound(got, Download(*ref_, yr),
                            with_bias ? b.Sum(b.gpu, ReferenceBiasBound(x, w, bias, m, k, n)) : b.GpuVsGpu(),
                            "vs cuBLAS " + Shape(m, k, n, with_bias));
        }
      }
    }
  }
}

// A Linear whose operands are not 16-byte aligned (a view one element into a
// buffer) or whose K is not a multiple of 8 falls back to cuBLAS, correctly.
TEST_F(SmallBatchTest, UnalignedOrOddKLinearFallsBack) {
  SEED_TRACE();
  const int64_t m = 2, k = 16, n = 5;
  const std::vector<float> x = RandomBf16(rng_, m * k + 1), w = RandomBf16(rng_, n * k, 0.1f);
  Buffer xc = Upload(*cpu_, x, {m * k + 1}), xf = Upload(*fast_, x, {m * k + 1});
  Buffer wc = Upload(*cpu_, w, {n, k}), wf = Upload(*fast_, w, {n, k});
  auto view = [&](const Buffer& b) {  // [m, k] from element 1
    Tensor t = b.tensor();
    t.ndim = 2;
    t.shape[0] = m;
    t.shape[1] = k;
    t.data = static_cast<char*>(t.data) + DTypeSize(t.dtype);
    return t;
  };
  EXPECT_FALSE(cuda::GemvSupports(view(xf).data, wf.tensor().data, m, n, k));
  Buffer yc = Output(*cpu_, {m, n}), yf = Output(*fast_, {m, n});
  cpu_->Linear(view(xc), wc, nullptr, yc.tensor());
  fast_->Linear(view(xf), wf, nullptr, yf.tensor());
  ExpectWithinBound(Download(*fast_, yf), Download(*cpu_, yc),
                    LinearBounds(std::vector<float>(x.begin() + 1, x.end()), w, nullptr, m, k, n).GpuVsCpu(),
                    "unaligned x");
  EXPECT_FALSE(cuda::GemvSupports(wf.tensor().data, wf.tensor().data, 1, n, 12)) << "K % 8 != 0";
  EXPECT_FALSE(cuda::GemvSupports(wf.tensor().data, wf.tensor().data, 9, n, 16)) << "M > 8";
  EXPECT_FALSE(cuda::GemvSupports(wf.tensor().data, wf.tensor().data, 0, n, 16)) << "M = 0";
  EXPECT_TRUE(cuda::GemvSupports(wf.tensor().data, wf.tensor().data, 8, n, 16));
}

// y = x·wᵀ (+ bias) in double from the same bf16 inputs.
std::vector<float> HostLinear(const std::vector<float>& x, const std::vector<float>& w, const float* bias,
                              int64_t m, int64_t k, int64_t n) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? bias[j] : 0.0;
      for (int64_t l = 0; l < k; ++l) s += double{x[i * k + l]} * w[j * k + l];
      y[i * n + j] = static_cast<float>(s);
    }
  }
  return y;
}

// LaunchGemv under every split (1, 2, 4, 8 columns per block), not only the
// one PlanGemv picks for this device; the row after y's M rows stays NaN.
TEST_F(SmallBatchTest, GemvUnderEverySplitMatchesAHostReference) {
  SEED_TRACE();
  for (int cols : {1, 2, 4, 8}) {
    const cuda::GemvPlan base{cols, cuda::kGemvWarps / cols, 0};
    for (int64_t m : {1, 3, 8}) {
      for (int64_t k : {int64_t{8}, kLargeK, kLoopK}) {
        for (int64_t n : {1, 13}) {
          const std::vector<float> x = RandomBf16(rng_, m * k), w = RandomBf16(rng_, n * k, 0.1f),
                                   bias = RandomBf16(rng_, n);
          Buffer xg = Upload(*fast_, x, {m, k}), wg = Upload(*fast_, w, {n, k}), bg = Upload(*fast_, bias, {n});
          for (bool with_bias : {false, true}) {
            Buffer yg = Output(*fast_, {m + 1, n});
            cuda::GemvPlan plan = base;
            plan.blocks = (n + cols - 1) / cols;
            ASSERT_EQ(cuda::LaunchGemv(static_cast<const __nv_bfloat16*>(xg.tensor().data),
                                       static_cast<const __nv_bfloat16*>(wg.tensor().data),
                                       with_bias ? static_cast<const __nv_bfloat16*>(bg.tensor().data) : nullptr,
                                       m, n, k, static_cast<__nv_bfloat16*>(yg.tensor().data), plan,
                                       static_cast<cudaStream_t>(fast_->stream())),
                      cudaSuccess);
            const std::vector<float> all = Download(*fast_, yg);
            const std::string what = "cols=" + std::to_string(cols) + " " + Shape(m, k, n, with_bias);
            // Against the exact value rounded to fp32 (half an fp32 ulp more).
            const Bounded b = LinearBounds(x, w, with_bias ? bias.data() : nullptr, m, k, n);
            std::vector<double> bound = b.gpu;
            for (size_t i = 0; i < bound.size(); ++i) bound[i] += kF32Unit * std::abs(b.exact[i]);
            ExpectWithinBound(std::vector<float>(all.begin(), all.begin() + m * n),
                              HostLinear(x, w, with_bias ? bias.data() : nullptr, m, k, n), bound, what);
            for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(all[m * n + j])) << what << ": wrote past M";
          }
        }
      }
    }
  }
  // A plan that does not cover N, or is no split at all, is refused.
  Buffer a = Output(*fast_, {8, 16});
  auto* p = static_cast<__nv_bfloat16*>(a.tensor().data);
  EXPECT_EQ(cuda::LaunchGemv(p, p, nullptr, 1, 16, 8, p, cuda::GemvPlan{8, 1, 1}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchGemv(p, p, nullptr, 1, 8, 8, p, cuda::GemvPlan{3, 2, 3}, nullptr), cudaErrorInvalidValue);
}

// The vector RmsNorm / AddRmsNorm (D a multiple of 8) against the CPU and the
// reference kernels, out of place and in place; D = 8200 gives threads two
// vectors each.
TEST_F(SmallBatchTest, VectorRmsNormMatchesCpuAndReferenceKernels) {
  SEED_TRACE();
  for (int64_t m : {1, 3, 19}) {
    for (int64_t d : {int64_t{8}, int64_t{24}, kLargeK, int64_t{8200}}) {
      const std::vector<float> x = RandomBf16(rng_, m * d, 2.f), r = RandomBf16(rng_, m * d, 2.f);
      std::vector<float> w = RandomBf16(rng_, d, 0.2f);
      for (float& v : w) v = Bf16ToFloat(FloatToBf16(1.f + v));
      const std::string what = "M=" + std::to_string(m) + " D=" + std::to_string(d);
      Buffer wc = Upload(*cpu_, w, {d}), wf = Upload(*fast_, w, {d}), wr = Upload(*ref_, w, {d});
      Buffer xc = Upload(*cpu_, x, {m, d}), xf = Upload(*fast_, x, {m, d}), xr = Upload(*ref_, x, {m, d});
      Buffer oc = Output(*cpu_, {m, d}), of = Output(*fast_, {m, d}), orf = Output(*ref_, {m, d});
      cpu_->RmsNorm(xc, wc, 1e-6f, oc.tensor());
      fast_->RmsNorm(xf, wf, 1e-6f, of.tensor());
      ref_->RmsNorm(xr, wr, 1e-6f, orf.tensor());
      const std::vector<float> out = Download(*fast_, of);
      const Bounded norm = RmsNormBounds(x, w, m, d, 1e-6);
      ExpectWithinBound(out, Download(*cpu_, oc), norm.GpuVsCpu(), "RmsNorm vs CPU " + what);
      ExpectWithinBound(out, Download(*ref_, orf), norm.GpuVsGpu(), "RmsNorm vs reference " + what);

      fast_->RmsNorm(xf, wf, 1e-6f, xf.tensor());  // in place
      EXPECT_EQ(Download(*fast_, xf), out) << "in-place RmsNorm " << what;

      Buffer xf2 = Upload(*fast_, x, {m, d}), xr2 = Upload(*ref_, x, {m, d});
      Buffer rc = Upload(*cpu_, r, {m, d}), rf = Upload(*fast_, r, {m, d}), rr = Upload(*ref_, r, {m, d});
      Buffer xc2 = Upload(*cpu_, x, {m, d});
      cpu_->AddRmsNorm(xc2.tensor(), rc.tensor(), wc, 1e-6f);
      fast_->AddRmsNorm(xf2.tensor(), rf.tensor(), wf, 1e-6f);
      ref_->AddRmsNorm(xr2.tensor(), rr.tensor(), wr, 1e-6f);
      EXPECT_EQ(Download(*fast_, rf), Download(*ref_, rr)) << "AddRmsNorm residual (one bf16 add) " << what;
      const AddRmsNormBounded add = AddRmsNormBounds(x, r, w, m, d, 1e-6);
      ExpectWithinBound(Download(*fast_, rf), Download(*cpu_, rc), add.residual.GpuVsCpu(),
                        "AddRmsNorm residual vs CPU " + what);
      ExpectWithinBound(Download(*fast_, xf2), Download(*cpu_, xc2), add.normed.GpuVsCpu(),
                        "AddRmsNorm x vs CPU " + what);
      // Both kernels normalize the same bf16 residual: RmsNorm's bound, twice.
      std::vector<double> same_residual;
      for (double y : add.normed_of_rounded) {
        same_residual.push_back(2 * (kBf16Unit + (1 + kBf16Unit) * RmsNormRho(d)) * std::abs(y));
      }
      ExpectWithinBound(Download(*fast_, xf2), Download(*ref_, xr2), same_residual, "AddRmsNorm x vs reference " + what);
    }
  }
}

// The first `rows` rows of `t` (a view; the rows after stay as they are).
Tensor FirstRows(const Tensor& t, int64_t rows) {
  Tensor v = t;
  v.shape[0] = rows;
  return v;
}

bool AllNan(const std::vector<float>& v, size_t from = 0) {
  return std::all_of(v.begin() + static_cast<std::ptrdiff_t>(from), v.end(), [](float x) { return std::isnan(x); });
}

// LinearSiluMul at M 1..9 and odd F: the fast set's fused GEMV (M <= 8, which
// leaves the gate_up scratch unwritten) against the CPU backend, the
// reference set (cuBLAS, then SiluMul) and the fast set's own two ops (the
// GEMV, then SiluMul: the same bits whenever the two plans split K alike);
// M = 9 runs the two ops. The row after the M rows of out stays NaN.
TEST_F(SmallBatchTest, LinearSiluMulAtMUpTo9MatchesTheTwoOpsCpuAndReference) {
  SEED_TRACE();
  const absl::StatusOr<cuda::DeviceInfo> device = cuda::QueryDevice(0);
  ASSERT_TRUE(device.ok()) << device.status();
  for (int64_t m = 1; m <= 9; ++m) {
    for (int64_t k : {int64_t{8}, int64_t{24}, kLargeK}) {
      for (int64_t f : {int64_t{1}, int64_t{19}, cuda_test::kLargeDim}) {
        // The largest K by the largest F at the edges of M only (the emulated run's time).
        if (k == kLargeK && f == cuda_test::kLargeDim && m != 1 && m != 8 && m != 9) continue;
        const std::string what = "M=" + std::to_string(m) + " K=" + std::to_string(k) + " F=" + std::to_string(f);
        const std::vector<float> x = RandomBf16(rng_, m * k), w = RandomBf16(rng_, 2 * f * k, 0.2f);
        Buffer xc = Upload(*cpu_, x, {m, k}), xf = Upload(*fast_, x, {m, k}), xr = Upload(*ref_, x, {m, k});
        Buffer wc = Upload(*cpu_, w, {2 * f, k}), wf = Upload(*fast_, w, {2 * f, k}),
               wr = Upload(*ref_, w, {2 * f, k});
        Buffer sc = Output(*cpu_, {m, 2 * f}), sf = Output(*fast_, {m, 2 * f}), sr = Output(*ref_, {m, 2 * f});
        Buffer oc = Output(*cpu_, {m, f}), of = Output(*fast_, {m + 1, f}), orf = Output(*ref_, {m, f});
        cpu_->LinearSiluMul(xc, wc, sc.tensor(), oc.tensor());
        fast_->LinearSiluMul(xf, wf, sf.tensor(), FirstRows(of.tensor(), m));
        ref_->LinearSiluMul(xr, wr, sr.tensor(), orf.tensor());
        const std::vector<float> all = Download(*fast_, of);
        const std::vector<float> got(all.begin(), all.begin() + m * f);
        EXPECT_TRUE(AllNan(all, static_cast<size_t>(m * f))) << what << ": wrote past M";
        const Bounded b = LinearSiluMulBounds(x, w, m, k, f);
        ExpectWithinBound(got, Download(*cpu_, oc), b.GpuVsCpu(), "vs CPU " + what);
        ExpectWithinBound(got, Download(*ref_, orf), b.GpuVsGpu(), "vs reference " + what);
        EXPECT_EQ(AllNan(Download(*fast_, sf)), m <= cuda::kGemvMaxRows)
            << what << ": the fused GEMV (M <= 8) leaves gate_up alone; M = 9 runs Linear into it";

        Buffer gate_up = Output(*fast_, {m, 2 * f}), two_ops = Output(*fast_, {m, f});
        fast_->Linear(xf, wf, nullptr, gate_up.tensor());
        fast_->SiluMul(gate_up, two_ops.tensor());
        const std::vector<float> unfused = Download(*fast_, two_ops);
        if (cuda::PlanGemvSiluMul(f, k, device->multiprocessors).k_split ==
            cuda::PlanGemv(2 * f, k, device->multiprocessors).k_split) {
          EXPECT_EQ(got, unfused) << what << ": the fused op must give the two ops' bits";
        } else {
          ExpectWithinBound(got, unfused, b.GpuVsGpu(), "vs the two ops " + what);
        }
      }
    }
  }
}

// LaunchGemvSiluMul under every split that pairs gate and up rows (2, 4 and 8
// columns per block) gives exactly LaunchGemv under the same split, then
// LaunchSiluMul; a one-column split, or one that does not cover F, is refused.
TEST_F(SmallBatchTest, GemvSiluMulUnderEverySplitMatchesTheTwoKernels) {
  SEED_TRACE();
  const auto stream = static_cast<cudaStream_t>(fast_->stream());
  auto bf = [](const Buffer& b) { return static_cast<__nv_bfloat16*>(b.tensor().data); };
  for (int cols : {2, 4, 8}) {
    for (int64_t m : {1, 3, 8}) {
      for (int64_t k : {int64_t{8}, kLargeK, kLoopK}) {
        for (int64_t f : {1, 13}) {
          const std::string what = "cols=" + std::to_string(cols) + " M=" + std::to_string(m) +
                                   " K=" + std::to_string(k) + " F=" + std::to_string(f);
          const std::vector<float> x = RandomBf16(rng_, m * k), w = RandomBf16(rng_, 2 * f * k, 0.2f);
          Buffer xg = Upload(*fast_, x, {m, k}), wg = Upload(*fast_, w, {2 * f, k});
          Buffer fused = Output(*fast_, {m + 1, f}), gate_up = Output(*fast_, {m, 2 * f}),
                 two = Output(*fast_, {m, f});
          const cuda::GemvPlan pairs{cols, cuda::kGemvWarps / cols, (f + cols / 2 - 1) / (cols / 2)};
          const cuda::GemvPlan columns{cols, cuda::kGemvWarps / cols, (2 * f + cols - 1) / cols};
          ASSERT_EQ(cuda::LaunchGemvSiluMul(bf(xg), bf(wg), m, f, k, bf(fused), pairs, stream), cudaSuccess) << what;
          ASSERT_EQ(cuda::LaunchGemv(bf(xg), bf(wg), nullptr, m, 2 * f, k, bf(gate_up), columns, stream),
                    cudaSuccess) << what;
          ASSERT_EQ(cuda::LaunchSiluMul(bf(gate_up), m, f, bf(two), stream), cudaSuccess) << what;
          const std::vector<float> all = Download(*fast_, fused);
          EXPECT_EQ(std::vector<float>(all.begin(), all.begin() + m * f), Download(*fast_, two)) << what;
          EXPECT_TRUE(AllNan(all, static_cast<size_t>(m * f))) << what << ": wrote past M";
        }
      }
    }
  }
  Buffer a = Output(*fast_, {8, 16});
  __nv_bfloat16* p = bf(a);
  EXPECT_EQ(cuda::LaunchGemvSiluMul(p, p, 1, 4, 8, p, cuda::GemvPlan{1, 8, 4}, stream), cudaErrorInvalidValue)
      << "one column per block cannot hold a gate/up pair";
  EXPECT_EQ(cuda::LaunchGemvSiluMul(p, p, 1, 5, 8, p, cuda::GemvPlan{2, 4, 4}, stream), cudaErrorInvalidValue)
      << "4 blocks of one pair leave feature 4 out";
  EXPECT_EQ(cuda::LaunchGemvSiluMul(p, p, 9, 4, 8, p, cuda::PlanGemvSiluMul(4, 8, 1), stream), cudaErrorInvalidValue)
      << "M > 8";
}

// The decode-path ops of the fast set with programmatic launches (PDL) give
// the bits they give without; with programmatic_launch = false, and under the
// reference set, no launch is programmatic (counted by the emulator).
TEST_F(SmallBatchTest, ProgrammaticLaunchesGiveTheSameBitsAndTheSwitchTurnsThemOff) {
  SEED_TRACE();
  const int64_t m = 3, k = 64, f = 24;  // f a multiple of 8: the second Linear (K = f) takes the GEMV too
  const std::vector<float> x = RandomBf16(rng_, m * k), w = RandomBf16(rng_, 2 * f * k, 0.2f),
                           w2 = RandomBf16(rng_, k * f, 0.2f), norm = RandomBf16(rng_, k, 0.2f);
  // Linear, LinearSiluMul, Linear back to K, AddRmsNorm and RmsNorm: every kernel that launches programmatically.
  auto run = [&](Backend& b) {
    Buffer xb = Upload(b, x, {m, k}), res = Upload(b, x, {m, k}), wb = Upload(b, w, {2 * f, k});
    Buffer w2b = Upload(b, w2, {k, f}), nb = Upload(b, norm, {k});
    Buffer gate_up = Output(b, {m, 2 * f}), act = Output(b, {m, f}), y = Output(b, {m, k}), z = Output(b, {m, k});
    b.Linear(xb, wb, nullptr, gate_up.tensor());
    b.LinearSiluMul(xb, wb, gate_up.tensor(), act.tensor());
    b.Linear(act, w2b, nullptr, y.tensor());
    b.AddRmsNorm(y.tensor(), res.tensor(), nb, 1e-6f);
    b.RmsNorm(y, nb, 1e-6f, z.tensor());
    std::vector<float> out = Download(b, gate_up);
    for (const Buffer* t : {&act, &y, &res, &z}) {
      const std::vector<float> v = Download(b, *t);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  };
  std::unique_ptr<Backend> with = MakeCudaBackend(0, cuda::KernelSet::kFast, true),
                           without = MakeCudaBackend(0, cuda::KernelSet::kFast, false),
                           reference = MakeCudaBackend(0, cuda::KernelSet::kReference, true);
#if defined(TPSERVE_CUDA_EMU)
  const int64_t start = cuda::emu::ProgrammaticLaunches();
#endif
  const std::vector<float> pdl = run(*with);
#if defined(TPSERVE_CUDA_EMU)
  EXPECT_EQ(cuda::emu::ProgrammaticLaunches() - start, 5) << "the emulated device is an sm_90";
  const int64_t after = cuda::emu::ProgrammaticLaunches();
#endif
  const std::vector<float> plain = run(*without);
  const std::vector<float> ref = run(*reference);
#if defined(TPSERVE_CUDA_EMU)
  EXPECT_EQ(cuda::emu::ProgrammaticLaunches(), after) << "programmatic_launch = false and the reference set";
#endif
  EXPECT_FALSE(std::any_of(pdl.begin(), pdl.end(), [](float v) { return std::isnan(v); }));
  EXPECT_EQ(pdl, plain);
  // Against the reference set: the two outputs computed from the common input
  // x, within their derived bounds. The three after them take those outputs,
  // which the two sets may round differently; their ops are held to the
  // reference set from common inputs by the tests above, and to the run
  // without PDL bit for bit here.
  const Bounded gate_up = LinearBounds(x, w, nullptr, m, k, 2 * f);
  const Bounded act = LinearSiluMulBounds(x, w, m, k, f);
  const auto part = [](const std::vector<float>& v, int64_t from, int64_t n) {
    return std::vector<float>(v.begin() + from, v.begin() + from + n);
  };
  ExpectWithinBound(part(pdl, 0, m * 2 * f), part(ref, 0, m * 2 * f), gate_up.GpuVsGpu(), "PDL gate_up vs reference");
  ExpectWithinBound(part(pdl, m * 2 * f, m * f), part(ref, m * 2 * f, m * f), act.GpuVsGpu(),
                    "PDL LinearSiluMul vs reference");
}

// Re-lays `step`'s block table at `columns` columns per row (-1 beyond each
// row's own), as a reserved backend's fixed stride has it.
void Restride(StepBatch& step, int32_t columns) {
  StepBatch::Arrays& a = step.mutable_arrays();
  std::vector<int32_t> table(static_cast<size_t>(step.num_seqs()) * columns, -1);
  for (int32_t s = 0; s < step.num_seqs(); ++s) {
    for (int32_t c = 0; c < a.max_blocks_per_seq; ++c) table[s * columns + c] = a.block_tables[s * a.max_blocks_per_seq + c];
  }
  a.block_tables = std::move(table);
  a.max_blocks_per_seq = columns;
}

// BeginStep uploads only the block-table columns a step uses. A first step
// fills every column of every row (row 1 and 2 with the wrong sequence's
// blocks beyond their own); a second step of short contexts at the same
// stride leaves those stale ids in the device table beyond its used columns.
// Attention (prefill rows and split decode rows) must read none of them: it
// equals the CPU backend's, which reads the -1-padded host table.
TEST_F(SmallBatchTest, StaleBlockTableColumnsBeyondTheUsedOnesAreNeverRead) {
  SEED_TRACE();
  const AttentionShape shape{8, 2, 64};
  const int32_t bs = 16, columns = 16;
  StepCapacity capacity;
  capacity.max_tokens = 64;
  capacity.max_seqs = 4;
  capacity.max_context = int64_t{bs} * columns;
  capacity.block_size = bs;
  capacity.max_query_heads = shape.num_heads;
  capacity.max_head_dim = shape.head_dim;
  ASSERT_TRUE(fast_->Reserve(capacity).ok());
  const int64_t num_blocks = 3 * columns + 3;  // three full rows and three blocks of the second step
  std::vector<int32_t> all(static_cast<size_t>(num_blocks));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  std::shuffle(all.begin(), all.end(), rng_);
  auto blocks = [&](int row) { return std::vector<int32_t>(all.begin() + row * columns, all.begin() + (row + 1) * columns); };

  // The first step: three decodes, every row's table full (rows 1 and 2 hold
  // their own blocks beyond their contexts of 20 and 3 tokens).
  const std::vector<SeqPart> wide_parts = {{bs * columns, 1, blocks(0)}, {20, 1, blocks(1)}, {3, 1, blocks(2)}};
  StepBatch wide = RandomStep(wide_parts, bs, rng_, 100);
  ASSERT_EQ(wide.arrays().max_blocks_per_seq, columns);
  // The second step: a 5-token prefill (row 0) and decodes at 20 and 3 with
  // other blocks (from the end of the shuffle), at the same 16-column stride.
  std::vector<int32_t> other(all.rbegin(), all.rbegin() + 3);
  const std::vector<SeqPart> narrow_parts = {{5, 5, {other[0]}}, {20, 1, {other[1], other[2]}},
                                             {3, 1, {blocks(2)[0]}}};
  StepBatch narrow = RandomStep(narrow_parts, bs, rng_, 100);
  ASSERT_EQ(narrow.arrays().max_blocks_per_seq, 2);
  Restride(narrow, columns);

  const int64_t hd = shape.head_dim, hkv = shape.num_kv_heads;
  const std::vector<float> cache_k = RandomBf16(rng_, num_blocks * bs * hkv * hd);
  const std::vector<float> cache_v = RandomBf16(rng_, num_blocks * bs * hkv * hd);
  Buffer kc = Upload(*cpu_, cache_k, {num_blocks, bs, hkv, hd}), kg = Upload(*fast_, cache_k, {num_blocks, bs, hkv, hd});
  Buffer vc = Upload(*cpu_, cache_v, {num_blocks, bs, hkv, hd}), vg = Upload(*fast_, cache_v, {num_blocks, bs, hkv, hd});
  const KvCacheLayer cpu_cache{kc.tensor(), vc.tensor()}, gpu_cache{kg.tensor(), vg.tensor()};
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (const StepBatch* step : {&wide, &narrow}) {
    ASSERT_TRUE(cpu_->BeginStep(step->view(), num_blocks, bs, capacity.max_context).ok());
    ASSERT_TRUE(fast_->BeginStep(step->view(), num_blocks, bs, capacity.max_context).ok());
    const int64_t T = step->num_tokens();
    const std::vector<float> qkv = RandomBf16(rng_, T * shape.qkv_width());
    Buffer qc = Upload(*cpu_, qkv, {T, shape.qkv_width()}), qg = Upload(*fast_, qkv, {T, shape.qkv_width()});
    Buffer oc = Output(*cpu_, {T, shape.num_heads * hd}), og = Output(*fast_, {T, shape.num_heads * hd});
    cpu_->Attention(qc, shape, cpu_cache, scale, oc.tensor());
    fast_->Attention(qg, shape, gpu_cache, scale, og.tensor());
    // Each row against its exact value through its own blocks: a stale column
    // read puts some row far outside the attention bound.
    const cuda_test::AttentionBounded want =
        cuda_test::HostStepAttention(step == &wide ? wide_parts : narrow_parts, bs, shape, qkv, cache_k, cache_v,
                                     scale, /*store_kv=*/false);
    std::vector<double> bound(want.gpu.size());
    for (size_t i = 0; i < bound.size(); ++i) bound[i] = want.gpu[i] + want.cpu[i];
    ExpectWithinBound(Download(*fast_, og), Download(*cpu_, oc), bound,
                      step == &wide ? "the full-table step" : "the step over stale columns");
  }
}

}  // namespace
}  // namespace tpserve
