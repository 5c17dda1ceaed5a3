// The loop nest of the CPU GEMM over one vector ISA, included by one
// translation unit per ISA (cpu_gemm_avx512.cc, cpu_gemm_avx2.cc compiled with
// their -m flags, and the portable one in cpu_gemm.cc). Everything here is in
// an unnamed namespace and uses nothing but the ISA's intrinsics or builtin
// operators: an inline function shared between a translation unit built with
// -mavx512f and one built without could be merged by the linker into the
// AVX-512 copy and run on a CPU without it.
//
// The formulation is the outer product: a slab of w's rows is packed
// (transposed) into panels [kc][P], P output columns each, and a register tile
// of R x rows by P columns adds, for each k, x[r][k] (broadcast) times the
// panel's row k (P values) to its accumulators. Each accumulator lane is one
// output element, and it sees exactly one fused multiply-add per k, in k
// order: cpu_gemm.h's order, whatever the tile, the slab or the ISA. Up to
// kTransposedGroups · V::kSmallRows rows of x (decode, and the verification
// steps of speculative decoding) skip the pack: each block of kLanes w rows by
// kLanes k is transposed in registers and goes straight into the multiply-adds
// of V::kSmallRows rows (TransposedTile), the same operations in the same
// order without a store and a reload of every weight; more rows take the
// same K block of those w rows again, V::kSmallRows at a time, from L1. Past
// that, up to kPanelRows rows (a verification step at batch 8 with 2 to 15
// proposals, a short prefill), one panel at a time is packed for each K block
// and every row tile of x passes over it while it sits in L1: each weight is
// still read from memory and transposed once per call.
//
// A translation unit defines `V`, the ISA's traits, before including this:
//   using Reg = ...;                               kLanes floats
//   static constexpr int kLanes, kRows, kVecs;     lanes; the tile: kRows x rows by kVecs registers (P = kVecs·kLanes)
//   static constexpr int kSmallRows;               x rows a TransposedTile takes (0: always pack)
//   static Reg Zero();
//   static Reg Load(const float* p);               p[0 .. kLanes)
//   static void Store(float* p, Reg v);
//   static Reg Broadcast(float v);
//   static Reg Fma(Reg a, Reg b, Reg acc);         acc + a·b rounded once, lane by lane
//   static Reg Add(Reg a, Reg b);
//   static void Transpose(Reg r[kLanes]);          the kLanes x kLanes block r (row i = r[i]) in place
//   static void PackPanel(const float* w, int64_t ldw, int rows, int64_t kc, float* out);
//                                                  out[k·P + j] = w[j·ldw + k] for j < rows, else 0
#pragma once

#include <cstdint>

namespace tpserve {
namespace cpu_gemm_internal {

// y[:, n0:n1) += x · w[n0:n1)ᵀ in K blocks of block_k (cpu_gemm.h's order); y
// holds the bias (or zeros) on entry. x [M, K], w [N, K], y [M, ldy]. pack:
// PackFloats(block_k) floats, 64-byte aligned, that the call may overwrite.
using GemmColumnsFn = void (*)(const float* x, const float* w, float* y, int64_t M, int64_t ldy,
                               int64_t K, int64_t n0, int64_t n1, int64_t block_k, float* pack);
void GemmColumnsAvx2(const float* x, const float* w, float* y, int64_t M, int64_t ldy, int64_t K,
                     int64_t n0, int64_t n1, int64_t block_k, float* pack);
void GemmColumnsAvx512(const float* x, const float* w, float* y, int64_t M, int64_t ldy, int64_t K,
                       int64_t n0, int64_t n1, int64_t block_k, float* pack);

// Panels per slab when many rows share it (one when M is small: a panel is
// packed and used while it is in L1), and the widest panel of any kernel.
inline constexpr int kSlabPanels = 8;
inline constexpr int kMaxPanelColumns = 48;
// The pack buffer a call with this block_k needs.
constexpr int64_t PackFloats(int64_t block_k) { return block_k * kSlabPanels * kMaxPanelColumns; }

}  // namespace cpu_gemm_internal

namespace {

// out[k·P + j] = w[j·ldw + k] for k < kc, j < rows; zero for rows <= j < P.
template <int P>
inline void PackPanelPlain(const float* w, int64_t ldw, int rows, int64_t k_begin, int64_t kc,
                           float* out) {
  for (int64_t k = k_begin; k < kc; ++k) {
    for (int j = 0; j < P; ++j) out[k * P + j] = j < rows ? w[j * ldw + k] : 0.0f;
  }
}

// y[r][c] += the K block's sum of x row r · panel column c (r < R, c < cols),
// each a chain of kc fused multiply-adds from zero, in k order.
template <int R>
inline void Tile(const float* x, int64_t ldx, const float* panel /*[kc][P]*/, int64_t kc, float* y,
                 int64_t ldy, int cols) {
  using Reg = typename V::Reg;
  constexpr int L = V::kLanes, NV = V::kVecs, P = NV * L;
  // The accumulators stay in registers: every loop over r and v is unrolled.
  Reg acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V::Zero();
  }
  for (int64_t k = 0; k < kc; ++k) {
    Reg wv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) wv[v] = V::Load(panel + k * P + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Reg xb = V::Broadcast(x[r * ldx + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = V::Fma(xb, wv[v], acc[r][v]);
    }
  }
  if (cols == P) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* yv = y + r * ldy + v * L;
        V::Store(yv, V::Add(V::Load(yv), acc[r][v]));
      }
    }
  } else {  // the last panel of the matrix: only its first `cols` columns exist
    alignas(64) float sums[P];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < NV; ++v) V::Store(sums + v * L, acc[r][v]);
      for (int c = 0; c < cols; ++c) y[r * ldy + c] = y[r * ldy + c] + sums[c];
    }
  }
}

// The M rows of x in tiles of V::kRows (then one shorter), each over every
// panel of a packed slab.
inline void SlabRows(const float* x, int64_t K, const float* pack, int64_t kc, int panels,
                     int64_t s0, int64_t s1, float* y, int64_t M, int64_t ldy) {
  constexpr int R = V::kRows, P = V::kVecs * V::kLanes;
  const auto tiles = [&]<int Rows>(int64_t m) {
    for (int p = 0; p < panels; ++p) {
      const int64_t c0 = s0 + int64_t{p} * P;
      const int cols = s1 - c0 < P ? static_cast<int>(s1 - c0) : P;
      Tile<Rows>(x + m * K, K, pack + p * kc * P, kc, y + m * ldy + c0, ldy, cols);
    }
  };
  int64_t m = 0;
  for (; m + R <= M; m += R) tiles.template operator()<R>(m);
  switch (M - m) {
    case 7: if constexpr (R > 7) tiles.template operator()<7>(m); break;
    case 6: if constexpr (R > 6) tiles.template operator()<6>(m); break;
    case 5: if constexpr (R > 5) tiles.template operator()<5>(m); break;
    case 4: if constexpr (R > 4) tiles.template operator()<4>(m); break;
    case 3: if constexpr (R > 3) tiles.template operator()<3>(m); break;
    case 2: if constexpr (R > 2) tiles.template operator()<2>(m); break;
    case 1: if constexpr (R > 1) tiles.template operator()<1>(m); break;
    default: break;
  }
}

// y[r][c] += the K block's sum of x row r · w row c (r < R, c < rows <=
// kLanes), each a chain of kc fused multiply-adds from zero, in k order: w's
// rows transposed kLanes x kLanes at a time in registers (zero-filled past
// `rows` and the K tail, whose products are never added).
template <int R>
inline void TransposedTile(const float* x, int64_t ldx, const float* w, int64_t ldw, int rows, int64_t kc,
                           float* y, int64_t ldy) {
  using Reg = typename V::Reg;
  constexpr int L = V::kLanes;
  Reg acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = V::Zero();
  int64_t k = 0;
  if (rows == L) {
    for (; k + L <= kc; k += L) {
      Reg t[L];
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) {
        // Four lines ahead in each row: kLanes rows are kLanes streams, more
        // than the hardware prefetchers keep ahead of alone (~5% at one row).
        __builtin_prefetch(w + i * ldw + k + 64);
        t[i] = V::Load(w + i * ldw + k);
      }
      V::Transpose(t);
#pragma GCC unroll 16
      for (int j = 0; j < L; ++j) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r] = V::Fma(V::Broadcast(x[r * ldx + k + j]), t[j], acc[r]);
      }
    }
  }
  for (; k < kc; k += L) {
    const int n = kc - k < L ? static_cast<int>(kc - k) : L;
    Reg t[L];
    alignas(64) float part[L];
    for (int i = 0; i < L; ++i) {
      for (int j = 0; j < L; ++j) part[j] = i < rows && j < n ? w[i * ldw + k + j] : 0.0f;
      t[i] = V::Load(part);
    }
    V::Transpose(t);
    for (int j = 0; j < n; ++j) {
      for (int r = 0; r < R; ++r) acc[r] = V::Fma(V::Broadcast(x[r * ldx + k + j]), t[j], acc[r]);
    }
  }
  if (rows == L) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) V::Store(y + r * ldy, V::Add(V::Load(y + r * ldy), acc[r]));
  } else {
    alignas(64) float sums[L];
    for (int r = 0; r < R; ++r) {
      V::Store(sums, acc[r]);
      for (int c = 0; c < rows; ++c) y[r * ldy + c] = y[r * ldy + c] + sums[c];
    }
  }
}

// The most groups of V::kSmallRows rows that SmallRows takes: past that,
// transposing each w block again for every group costs more than packing it
// once into a panel that every row tile reads from L1 (bench/cpu_gemm_bench on
// the Qwen3-0.6B shape: at 24 and 32 rows the panel took 0.9 and 0.8 of the
// time of 3 and 4 groups, and 16 rows cost the same either way; README,
// "Speculative decoding").
inline constexpr int kTransposedGroups = 2;

// TransposedTile for the M rows of x in groups of V::kSmallRows (the last
// shorter) over one block of `rows` w rows by kc k: the first group reads the
// block from memory, the others (kLanes rows by a K block: 16 KB with
// AVX-512) from L1.
inline void TransposedGroups(const float* x, int64_t K, const float* w, int rows, int64_t kc, float* y,
                             int64_t ldy, int64_t M) {
  constexpr int G = V::kSmallRows;
  for (int64_t m = 0; m < M; m += G) {
    const float* xm = x + m * K;
    float* ym = y + m * ldy;
    switch (M - m < G ? static_cast<int>(M - m) : G) {
      case 8: if constexpr (G >= 8) TransposedTile<8>(xm, K, w, K, rows, kc, ym, ldy); break;
      case 7: if constexpr (G >= 7) TransposedTile<7>(xm, K, w, K, rows, kc, ym, ldy); break;
      case 6: if constexpr (G >= 6) TransposedTile<6>(xm, K, w, K, rows, kc, ym, ldy); break;
      case 5: if constexpr (G >= 5) TransposedTile<5>(xm, K, w, K, rows, kc, ym, ldy); break;
      case 4: if constexpr (G >= 4) TransposedTile<4>(xm, K, w, K, rows, kc, ym, ldy); break;
      case 3: if constexpr (G >= 3) TransposedTile<3>(xm, K, w, K, rows, kc, ym, ldy); break;
      case 2: if constexpr (G >= 2) TransposedTile<2>(xm, K, w, K, rows, kc, ym, ldy); break;
      case 1: TransposedTile<1>(xm, K, w, K, rows, kc, ym, ldy); break;
      default: break;
    }
  }
}

// The columns [n0, n1) for M <= kTransposedGroups · V::kSmallRows rows of x:
// kLanes w rows at a time, each through every K block in order, every group
// of rows over each block.
inline void SmallRows(const float* x, int64_t K, const float* w, float* y, int64_t ldy, int64_t M, int64_t n0,
                      int64_t n1, int64_t block_k) {
  constexpr int L = V::kLanes;
  for (int64_t c0 = n0; c0 < n1; c0 += L) {
    const int rows = n1 - c0 < L ? static_cast<int>(n1 - c0) : L;
    for (int64_t k0 = 0; k0 < K; k0 += block_k) {
      const int64_t kc = K - k0 < block_k ? K - k0 : block_k;
      TransposedGroups(x + k0, K, w + c0 * K + k0, rows, kc, y + c0, ldy, M);
    }
  }
}

// The most rows of x that pass over one packed panel at a time: a panel's K
// block (P columns by block_k: 48 KB with AVX-512) stays in L1 while every row
// tile reads it, and x (M x K, read again for each panel) in L2 up to K = 3072
// (1.5 MB); past that, slabs of kSlabPanels panels read x a slab at a time
// (README, "Speculative decoding", measured on the Qwen3-0.6B shape).
inline constexpr int64_t kPanelRows = 128;

// cpu_gemm_internal::GemmColumnsFn over V. Up to kTransposedGroups ·
// V::kSmallRows rows of x: SmallRows. Else slabs of w rows are packed, and every row tile of x passes
// over a slab: for up to kPanelRows rows a slab is one panel, taken through every K
// block in turn (each panel's rows stream once); for more, kSlabPanels panels
// of one K block at a time, the K blocks in order.
inline void GemmColumns(const float* x, const float* w, float* y, int64_t M, int64_t ldy, int64_t K,
                        int64_t n0, int64_t n1, int64_t block_k, float* pack) {
  static_assert(V::kRows >= 1 && V::kRows <= 8 && V::kSmallRows <= 8);
  constexpr int P = V::kVecs * V::kLanes;
  static_assert(P <= cpu_gemm_internal::kMaxPanelColumns);
  if constexpr (V::kSmallRows > 0) {
    if (M <= kTransposedGroups * V::kSmallRows) return SmallRows(x, K, w, y, ldy, M, n0, n1, block_k);
  }
  if (M <= kPanelRows) {
    for (int64_t c0 = n0; c0 < n1; c0 += P) {
      const int rows = n1 - c0 < P ? static_cast<int>(n1 - c0) : P;
      for (int64_t k0 = 0; k0 < K; k0 += block_k) {
        const int64_t kc = K - k0 < block_k ? K - k0 : block_k;
        V::PackPanel(w + c0 * K + k0, K, rows, kc, pack);
        SlabRows(x + k0, K, pack, kc, 1, c0, c0 + rows, y, M, ldy);
      }
    }
    return;
  }
  constexpr int64_t kSlab = int64_t{cpu_gemm_internal::kSlabPanels} * P;
  for (int64_t k0 = 0; k0 < K; k0 += block_k) {
    const int64_t kc = K - k0 < block_k ? K - k0 : block_k;
    for (int64_t s0 = n0; s0 < n1; s0 += kSlab) {
      const int64_t s1 = n1 - s0 < kSlab ? n1 : s0 + kSlab;
      const int panels = static_cast<int>((s1 - s0 + P - 1) / P);
      for (int p = 0; p < panels; ++p) {
        const int64_t c0 = s0 + int64_t{p} * P;
        const int rows = s1 - c0 < P ? static_cast<int>(s1 - c0) : P;
        V::PackPanel(w + c0 * K + k0, K, rows, kc, pack + p * kc * P);
      }
      SlabRows(x + k0, K, pack, kc, panels, s0, s1, y, M, ldy);
    }
  }
}

}  // namespace
}  // namespace tpserve
