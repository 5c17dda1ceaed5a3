#include "backend/cpu_gemm.h"

#include <algorithm>
#include <climits>
#include <cstring>

#if TPSERVE_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "base/check.h"

namespace tpserve {
namespace {

constexpr int64_t kBlockK = 512;  // a K block of 4 x rows (8 KiB) stays in L1
constexpr int64_t kBlockN = 64;   // w rows per slab

// Four floats as one value (GCC/Clang vector extension; SSE width, the x86-64
// baseline): the partial sums stay in registers, which float arrays did not at -O2.
using F4 = float __attribute__((vector_size(16)));

inline F4 Load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// out[r] += Σ_k x[r][k] · w[k] for r < MR, over one K block of length kc, with
// two independent 4-lane partial sums per row (enough independent additions to
// hide their latency; vectorised without -ffast-math). Each row's sum is
// formed in the same order whatever MR is, so a row's result does not depend
// on how many rows share the call (CpuGemmFallback's batch invariance).
template <int MR>
inline void DotRows(const float* x /*[MR, ldx]*/, int64_t ldx, const float* w /*[kc]*/,
                    int64_t kc, float* out /*[MR], accumulated into*/, int64_t ldo) {
  constexpr int kNV = 2, kStep = 4 * kNV;
  F4 acc[MR][kNV] = {};
  int64_t k = 0;
  for (; k + kStep <= kc; k += kStep) {
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) {
      const F4 wv = Load4(w + k + 4 * v);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r][v] += Load4(x + r * ldx + k + 4 * v) * wv;
    }
  }
  for (int r = 0; r < MR; ++r) {
    float s = 0.f;
    for (int v = 0; v < kNV; ++v) {
      for (int l = 0; l < 4; ++l) s += acc[r][v][l];
    }
    for (int64_t kk = k; kk < kc; ++kk) s += x[r * ldx + kk] * w[kk];
    out[r * ldo] += s;
  }
}

void InitOutput(const float* bias, float* y, int64_t M, int64_t N) {
  for (int64_t m = 0; m < M; ++m) {
    if (bias) {
      std::memcpy(y + m * N, bias, static_cast<size_t>(N) * sizeof(float));
    } else {
      std::fill(y + m * N, y + (m + 1) * N, 0.f);
    }
  }
}

}  // namespace

void CpuGemmFallback(const float* x, const float* w, const float* bias, float* y, int64_t M,
                     int64_t N, int64_t K) {
  InitOutput(bias, y, M, N);
  // A [kBlockN, kBlockK] slab of w (128 KiB) stays in L2 while every group of 4
  // x rows passes over it. The K blocks are the same for every M, so each
  // element is summed in one order whatever the batch (cpu_gemm.h).
  for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
    const int64_t kc = std::min(kBlockK, K - k0);
    for (int64_t n0 = 0; n0 < N; n0 += kBlockN) {
      const int64_t n1 = std::min(N, n0 + kBlockN);
      int64_t m = 0;
      for (; m + 4 <= M; m += 4) {
        for (int64_t n = n0; n < n1; ++n) {
          DotRows<4>(x + m * K + k0, K, w + n * K + k0, kc, y + m * N + n, N);
        }
      }
      for (; m < M; ++m) {
        for (int64_t n = n0; n < n1; ++n) {
          DotRows<1>(x + m * K + k0, K, w + n * K + k0, kc, y + m * N + n, N);
        }
      }
    }
  }
}

#if TPSERVE_HAVE_OPENBLAS

void CpuGemm(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N,
             int64_t K) {
  if (M == 0 || N == 0) return;
  if (K == 0) return InitOutput(bias, y, M, N);
  TPSERVE_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX, "CpuGemm: M=", M, " N=", N, " K=", K,
                " exceed OpenBLAS's 32-bit sizes");
  float beta = 0.f;
  if (bias) {
    InitOutput(bias, y, M, N);
    beta = 1.f;
  }
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  if (M == 1) {
    // Decode of a single token: y = W · x.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.f, w, k, x, 1, beta, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, x, k, w, k, beta, y, n);
  }
}

void CpuGemmSetNumThreads(int num_threads) { openblas_set_num_threads(std::max(1, num_threads)); }

const char* CpuGemmImplementation() { return "openblas"; }

#else

void CpuGemm(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N,
             int64_t K) {
  CpuGemmFallback(x, w, bias, y, M, N, K);
}

void CpuGemmSetNumThreads(int) {}

const char* CpuGemmImplementation() { return "fallback"; }

#endif

}  // namespace tpserve
