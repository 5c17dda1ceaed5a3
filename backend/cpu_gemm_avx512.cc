// The AVX-512 kernel of the CPU GEMM (cpu_gemm.h, cpu_gemm_kernel.h): a
// register tile of 8 x rows by 48 columns (24 accumulators, 3 panel vectors
// and a broadcast of the 32 zmm registers); panels packed by 16 x 16
// transposes in registers, which up to 16 rows of x (8 at a time) take
// straight into their multiply-adds instead. Built with -mavx512f
// (backend/CMakeLists.txt); cpu_gemm.cc calls it only on a CPU that has
// AVX-512F. Includes nothing but the intrinsics (cpu_gemm_kernel.h says why).
#include <immintrin.h>

#include <cstdint>

namespace tpserve {
namespace {

// Transposes the 16 x 16 block r (row i = r[i]) in place, in three rounds of
// shuffles: 32-bit pairs, 64-bit pairs, then 128-bit lanes (64 shuffles).
// (__builtin_shufflevector rather than the intrinsics: GCC 12 warns of its own
// "undefined" pass-through operands in some of them.) Inlined and unrolled
// whole, or GCC keeps t and u on the stack.
__attribute__((always_inline)) inline void Transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // t[2i] = a0 b0 a1 b1 | a4 b4 a5 b5 | ..., t[2i+1] = a2 b2 a3 b3 | ...
    t[2 * i] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12,
                                       28, 13, 29);
    t[2 * i + 1] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11,
                                           27, 14, 30, 15, 31);
  }
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {  // u[4g + j], 128-bit lane l: rows 4g .. 4g+3 of column j + 4l
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512 a = t[4 * g + h], b = t[4 * g + 2 + h];
      u[4 * g + 2 * h] =
          __builtin_shufflevector(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
      u[4 * g + 2 * h + 1] =
          __builtin_shufflevector(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {  // gather lane l of the four row groups: column j + 4l
    const __m512 v0 = __builtin_shufflevector(u[j], u[4 + j], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24,
                                              25, 26, 27);
    const __m512 v1 = __builtin_shufflevector(u[j], u[4 + j], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23,
                                              28, 29, 30, 31);
    const __m512 z0 = __builtin_shufflevector(u[8 + j], u[12 + j], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18,
                                              19, 24, 25, 26, 27);
    const __m512 z1 = __builtin_shufflevector(u[8 + j], u[12 + j], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                              23, 28, 29, 30, 31);
    r[j] = __builtin_shufflevector(v0, z0, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    r[j + 8] = __builtin_shufflevector(v0, z0, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    r[j + 4] = __builtin_shufflevector(v1, z1, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    r[j + 12] = __builtin_shufflevector(v1, z1, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  }
}

struct V {
  using Reg = __m512;
  static constexpr int kLanes = 16, kRows = 8, kVecs = 3, kSmallRows = 8;
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg Broadcast(float v) { return _mm512_set1_ps(v); }
  static Reg Fma(Reg a, Reg b, Reg acc) { return _mm512_fmadd_ps(a, b, acc); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  __attribute__((always_inline)) static void Transpose(Reg r[16]) { Transpose16(r); }
  static void PackPanel(const float* w, int64_t ldw, int rows, int64_t kc, float* out);
};

}  // namespace
}  // namespace tpserve

#include "backend/cpu_gemm_kernel.h"

namespace tpserve {
namespace {

// Whole 16 x 16 blocks through Transpose16; a partial panel and the k tail plainly.
void V::PackPanel(const float* w, int64_t ldw, int rows, int64_t kc, float* out) {
  constexpr int P = kLanes * kVecs;
  int64_t k = 0;
  if (rows == P) {
    for (; k + 16 <= kc; k += 16) {
      for (int q = 0; q < kVecs; ++q) {
        __m512 r[16];
        for (int i = 0; i < 16; ++i) {
          __builtin_prefetch(w + (16 * q + i) * ldw + k + 64);  // as TransposedTile: P rows are P streams
          r[i] = Load(w + (16 * q + i) * ldw + k);
        }
        Transpose16(r);
        for (int j = 0; j < 16; ++j) Store(out + (k + j) * P + 16 * q, r[j]);
      }
    }
  }
  PackPanelPlain<P>(w, ldw, rows, k, kc, out);
}

}  // namespace
}  // namespace tpserve

namespace tpserve::cpu_gemm_internal {

void GemmColumnsAvx512(const float* x, const float* w, float* y, int64_t M, int64_t ldy, int64_t K,
                       int64_t n0, int64_t n1, int64_t block_k, float* pack) {
  GemmColumns(x, w, y, M, ldy, K, n0, n1, block_k, pack);
}

}  // namespace tpserve::cpu_gemm_internal
