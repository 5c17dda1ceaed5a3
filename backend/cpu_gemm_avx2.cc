// The AVX2 kernel of the CPU GEMM (cpu_gemm.h, cpu_gemm_kernel.h): a register
// tile of 4 x rows by 24 columns (12 accumulators, 3 panel vectors and a
// broadcast: the 16 ymm registers); panels packed by 8 x 8 transposes in
// registers, which up to 8 rows of x (4 at a time) take straight into their
// multiply-adds instead. Built with -mavx2 -mfma (backend/CMakeLists.txt);
// cpu_gemm.cc calls it only on a CPU that has both. Includes nothing but the
// intrinsics (cpu_gemm_kernel.h says why).
#include <immintrin.h>

#include <cstdint>

namespace tpserve {
namespace {

// Transposes the 8 x 8 block r (row i = r[i]) in place: 32-bit pairs, 64-bit
// pairs, then 128-bit halves (24 shuffles). Inlined and unrolled whole, or GCC
// keeps t and u on the stack.
__attribute__((always_inline)) inline void Transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[2 * i + 1] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g) {  // u[4g + j], 128-bit half l: rows 4g .. 4g+3 of column j + 4l
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 a = t[4 * g + h], b = t[4 * g + 2 + h];
      u[4 * g + 2 * h] = __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13);
      u[4 * g + 2 * h + 1] = __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    r[j] = __builtin_shufflevector(u[j], u[4 + j], 0, 1, 2, 3, 8, 9, 10, 11);
    r[j + 4] = __builtin_shufflevector(u[j], u[4 + j], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

struct V {
  using Reg = __m256;
  static constexpr int kLanes = 8, kRows = 4, kVecs = 3, kSmallRows = 4;
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg Broadcast(float v) { return _mm256_set1_ps(v); }
  static Reg Fma(Reg a, Reg b, Reg acc) { return _mm256_fmadd_ps(a, b, acc); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  __attribute__((always_inline)) static void Transpose(Reg r[8]) { Transpose8(r); }
  static void PackPanel(const float* w, int64_t ldw, int rows, int64_t kc, float* out);
};

}  // namespace
}  // namespace tpserve

#include "backend/cpu_gemm_kernel.h"

namespace tpserve {
namespace {

// Whole 8 x 8 blocks through Transpose8; a partial panel and the k tail plainly.
void V::PackPanel(const float* w, int64_t ldw, int rows, int64_t kc, float* out) {
  constexpr int P = kLanes * kVecs;
  int64_t k = 0;
  if (rows == P) {
    for (; k + 8 <= kc; k += 8) {
      for (int q = 0; q < kVecs; ++q) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) {
          __builtin_prefetch(w + (8 * q + i) * ldw + k + 64);  // as TransposedTile: P rows are P streams
          r[i] = Load(w + (8 * q + i) * ldw + k);
        }
        Transpose8(r);
        for (int j = 0; j < 8; ++j) Store(out + (k + j) * P + 8 * q, r[j]);
      }
    }
  }
  PackPanelPlain<P>(w, ldw, rows, k, kc, out);
}

}  // namespace
}  // namespace tpserve

namespace tpserve::cpu_gemm_internal {

void GemmColumnsAvx2(const float* x, const float* w, float* y, int64_t M, int64_t ldy, int64_t K,
                     int64_t n0, int64_t n1, int64_t block_k, float* pack) {
  GemmColumns(x, w, y, M, ldy, K, n0, n1, block_k, pack);
}

}  // namespace tpserve::cpu_gemm_internal
