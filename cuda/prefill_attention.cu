#include <math_constants.h>

#include "cuda/mma.cuh"
#include "cuda/prefill_attention.cuh"
#include "cuda/prefill_tiles.h"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;  // 16 query rows each
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kBM = kPrefillTileRows, kBN = kPrefillKeyTile;
static_assert(kBM == kWarps * 16, "one m16 row block per warp");
constexpr int kPad = 8;  // bf16 per shared row beyond the data: rows stay 16-byte aligned, banks rotate

// One K/V tile in shared memory as bf16 bits, both [key][d] as in the cache
// (16-byte stores). The Q·Kᵀ B operand reads two adjacent dims of a key as one
// 32-bit word; the P·V one pairs two keys' values of one dim from two 16-bit
// reads. With rows of HD + kPad halves, a warp's reads of either hit 32
// different banks or share a word, and a transposed store (V as [d][key]),
// which would make the second operand one word, conflicts 16 ways instead.
template <int HD>
struct KvTile {
  alignas(16) uint16_t k[kBN][HD + kPad];
  alignas(16) uint16_t v[kBN][HD + kPad];
};


// One thread's share of a K or V tile in flight from global memory to shared:
// 16-byte pieces c = threadIdx.x + i · kThreads of the tile's kBN rows
// (row c / (HD / 8), dims 8 · (c % (HD / 8)) ..). Loading into registers
// first lets the next tile's loads overlap this tile's mma.
template <int HD>
struct TileLoads {
  static constexpr int kChunks = HD / 8;  // 16-byte pieces per row
  static constexpr int kPerThread = kBN * kChunks / kThreads;
  static_assert(kBN * kChunks % kThreads == 0, "whole pieces per thread");
  uint4 piece[kPerThread];
};

// Keys [k0, k0 + kBN) of the sequence (table) for KV head kvh from `cache`
// (K or V); keys at or past ctx are zeros (their scores are masked, and a
// zero V row keeps P·V finite).
template <int HD>
__device__ void LoadTile(const PagedAttentionArgs& a, const bf16* cache, const int32_t* table, int kvh, int k0,
                         int ctx, TileLoads<HD>& in) {
  constexpr int kChunks = TileLoads<HD>::kChunks;
#pragma unroll
  for (int i = 0; i < TileLoads<HD>::kPerThread; ++i) {
    const int c = threadIdx.x + i * kThreads, r = c / kChunks, col = (c % kChunks) * 8, key = k0 + r;
    in.piece[i] = uint4{0u, 0u, 0u, 0u};
    if (key < ctx) in.piece[i] = LoadBits<uint4>(cache + (KeySlot(table, key, a.block_size) * a.num_kv_heads + kvh) * HD + col);
  }
}

// The pieces into `rows` (the tile's k or v).
template <int HD>
__device__ void StoreTile(const TileLoads<HD>& in, uint16_t (*rows)[HD + kPad]) {
  constexpr int kChunks = TileLoads<HD>::kChunks;
#pragma unroll
  for (int i = 0; i < TileLoads<HD>::kPerThread; ++i) {
    const int c = threadIdx.x + i * kThreads;
    StoreBits(&rows[c / kChunks][(c % kChunks) * 8], in.piece[i]);
  }
}

// The lane's query rows row_g and row_g + 8 of the tile (head h) as A
// fragments (mma.cuh's layout): q[kk] covers dims 16kk .. 16kk + 15; rows past
// the tile are 0.
template <int HD>
__device__ void LoadQueryFragments(const PagedAttentionArgs& a, const PrefillTile& tile, int h, int row_g,
                                   uint32_t (&q)[HD / 16][4]) {
  const int t = threadIdx.x % 4;
  const int64_t width = int64_t{a.num_heads + 2 * a.num_kv_heads} * HD;
  const bf16* rows[2] = {nullptr, nullptr};
  for (int half = 0; half < 2; ++half) {
    const int r = row_g + 8 * half;
    if (r < tile.rows) rows[half] = a.qkv + (tile.row_begin + r) * width + int64_t{h} * HD;
  }
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const int d = kk * 16 + 2 * t;
    q[kk][0] = rows[0] ? Load32(rows[0] + d) : 0u;
    q[kk][1] = rows[1] ? Load32(rows[1] + d) : 0u;
    q[kk][2] = rows[0] ? Load32(rows[0] + d + 8) : 0u;
    q[kk][3] = rows[1] ? Load32(rows[1] + d + 8) : 0u;
  }
}

// The per-warp state of the online softmax: rows g (index 0) and g + 8 (1).
template <int HD>
struct RowState {
  float o[HD / 8][4];  // O accumulator in C fragments: n-tile nd = dims 8nd .. 8nd + 7
  float max[2];        // running max of the scaled scores
  float sum[2];        // this lane's part of Σ e^(s − max) (summed over the 4 lanes at the end)
};

// S = Q·Kᵀ for the warp's 16 rows and the tile's kBN keys, scaled, masked when
// `masked` (key > the row's position → −∞); then the online-softmax update of
// `st` (its O rescaled) and P = e^(S − max) into s, in S's C-fragment layout.
template <int HD>
__device__ void ScoreKeyTile(const KvTile<HD>& kv, const uint32_t (&q)[HD / 16][4], float scale, int k0,
                             bool masked, const int (&row_pos)[2], RowState<HD>& st, float (&s)[kBN / 8][4]) {
  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      const uint32_t b[2] = {Load32(&kv.k[nt * 8 + g][kk * 16 + 2 * t]), Load32(&kv.k[nt * 8 + g][kk * 16 + 2 * t + 8])};
      MmaBf16M16N8K16(s[nt], q[kk], b, s[nt]);
    }
  }
  float tile_max[2] = {-CUDART_INF_F, -CUDART_INF_F};
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = k0 + nt * 8 + 2 * t + (i & 1);
      float v = s[nt][i] * scale;
      if (masked && !KeyVisible(key, row_pos[i / 2])) v = -CUDART_INF_F;
      s[nt][i] = v;
      tile_max[i / 2] = fmaxf(tile_max[i / 2], v);
    }
  }
  float use_max[2], correction[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const RowRescale rescale = RaiseRowMax(st.max[r], FragmentRowMax(tile_max[r]));
    use_max[r] = rescale.use_max;
    correction[r] = rescale.correction;
    st.sum[r] *= correction[r];
  }
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[nt][i] = __expf(s[nt][i] - use_max[i / 2]);
      st.sum[i / 2] += s[nt][i];
    }
  }
#pragma unroll
  for (int nd = 0; nd < HD / 8; ++nd) {
#pragma unroll
    for (int i = 0; i < 4; ++i) st.o[nd][i] *= correction[i / 2];
  }
}

// O += P·V: P (C layout of S, two key n-tiles per k-chunk) is the A operand;
// B = V[keys 16kc ..][dims 8nd ..] pairs keys 2t, 2t + 1 (b[0]) and 2t + 8,
// 2t + 9 (b[1]) of dim g, the lower key in the low half.
template <int HD>
__device__ void AccumulateValues(const KvTile<HD>& kv, const float (&s)[kBN / 8][4], RowState<HD>& st) {
  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kc = 0; kc < kBN / 16; ++kc) {
    const uint32_t p[4] = {PackFloatsBf16x2(s[2 * kc][0], s[2 * kc][1]), PackFloatsBf16x2(s[2 * kc][2], s[2 * kc][3]),
                           PackFloatsBf16x2(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                           PackFloatsBf16x2(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) {
      const int key = kc * 16 + 2 * t, d = nd * 8 + g;
      const uint32_t b[2] = {uint32_t{kv.v[key][d]} | uint32_t{kv.v[key + 1][d]} << 16,
                             uint32_t{kv.v[key + 8][d]} | uint32_t{kv.v[key + 9][d]} << 16};
      MmaBf16M16N8K16(st.o[nd], p, b, st.o[nd]);
    }
  }
}

// grid: x = tile, y = query head.
template <int HD>
__global__ void __launch_bounds__(kThreads) PrefillAttentionKernel(PagedAttentionArgs a, const PrefillTile* tiles) {
  TPSERVE_SHARED(KvTile<HD>, kv);
  const PrefillTile tile = tiles[blockIdx.x];
  const int h = blockIdx.y, kvh = h / (a.num_heads / a.num_kv_heads);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, g = lane / 4, t = lane % 4;
  const int row_g = warp * 16 + g;  // the lane's rows: row_g and row_g + 8 of the tile
  const int row_pos[2] = {tile.pos_begin + row_g, tile.pos_begin + row_g + 8};

  uint32_t q[HD / 16][4];
  LoadQueryFragments<HD>(a, tile, h, row_g, q);
  RowState<HD> st;
#pragma unroll
  for (int nd = 0; nd < HD / 8; ++nd) st.o[nd][0] = st.o[nd][1] = st.o[nd][2] = st.o[nd][3] = 0.f;
  st.max[0] = st.max[1] = -CUDART_INF_F;
  st.sum[0] = st.sum[1] = 0.f;

  const int32_t* table = a.block_tables + int64_t{tile.seq} * a.max_blocks_per_seq;
  const int ctx = TileContext(tile), key_tiles = KeyTiles(tile, kBN), first_masked = FirstMaskedKeyTile(tile, kBN);
  // Software pipeline: V of tile kt loads while its scores are computed, K of
  // tile kt + 1 while its values are accumulated.
  TileLoads<HD> in;
  LoadTile<HD>(a, a.k_cache, table, kvh, 0, ctx, in);
  StoreTile<HD>(in, kv.k);
  for (int kt = 0; kt < key_tiles; ++kt) {
    LoadTile<HD>(a, a.v_cache, table, kvh, kt * kBN, ctx, in);
    __syncthreads();  // K of tile kt stored; every warp done reading V of tile kt − 1
    float p[kBN / 8][4];
    ScoreKeyTile<HD>(kv, q, a.scale, kt * kBN, kt >= first_masked, row_pos, st, p);
    StoreTile<HD>(in, kv.v);
    if (kt + 1 < key_tiles) LoadTile<HD>(a, a.k_cache, table, kvh, (kt + 1) * kBN, ctx, in);
    __syncthreads();  // V of tile kt stored; every warp done reading K of tile kt
    AccumulateValues<HD>(kv, p, st);
    if (kt + 1 < key_tiles) StoreTile<HD>(in, kv.k);
  }

  const int64_t out_width = int64_t{a.num_heads} * HD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = FragmentRowSum(st.sum[r]);
    const int row = row_g + 8 * r;
    if (row >= tile.rows) continue;
    const float inv = 1.f / total;  // > 0: key 0 is visible to every row
    bf16* out = a.out + (tile.row_begin + row) * out_width + int64_t{h} * HD;
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) {
      const uint32_t pair = PackFloatsBf16x2(st.o[nd][2 * r] * inv, st.o[nd][2 * r + 1] * inv);
      StoreBits(out + nd * 8 + 2 * t, pair);
    }
  }
}

}  // namespace

bool PrefillAttentionCovers(int head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t LaunchPrefillAttention(const PagedAttentionArgs& a, const PrefillTile* tiles, int64_t num_tiles,
                                   cudaStream_t stream) {
  if (num_tiles == 0) return cudaSuccess;
  // The kernel moves K/V rows in 16-byte pieces and q/out in 4-byte pairs.
  const auto aligned = [](const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
  if (!PrefillAttentionCovers(a.head_dim) || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      a.num_heads > 65535 || a.block_size <= 0 || tiles == nullptr || num_tiles < 0 || num_tiles > 0x7fffffff ||
      !aligned(a.k_cache, 16) || !aligned(a.v_cache, 16) || !aligned(a.qkv, 4) || !aligned(a.out, 4)) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(a.num_heads));
  if (a.head_dim == 64) {
    TPSERVE_LAUNCH(PrefillAttentionKernel<64>, grid, kThreads, 0, stream)(a, tiles);
  } else {
    TPSERVE_LAUNCH(PrefillAttentionKernel<128>, grid, kThreads, 0, stream)(a, tiles);
  }
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
