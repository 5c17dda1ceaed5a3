#include <math_constants.h>

#include "cuda/attention_merge.h"
#include "cuda/det_attention.cuh"
#include "cuda/mma.cuh"
#include "cuda/prefill_tiles.h"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kKT = kDetKeyTile;    // keys per tile: two n8 tiles of S, one k16 step of P·V
constexpr int kRows = kDetTileRows;  // one m16 tile: the warp's rows
constexpr int kPad = 8;              // bf16 per shared row beyond the data: rows stay 16-byte aligned
static_assert(kKT == 16 && kRows == 16, "one warp's m16 rows, one k16 step of keys");

// ---- the merge of partition partials, shared by the in-order kernel and the merge kernel ----
// Every rounding is spelled out (__fmul_rn is never contracted into an FMA),
// so both compile to the same operations.

struct MergeWeights {
  float total, part;  // what the running total and the next partial are scaled by
};
// Raises the running (max, sum) by a partial's (max, sum); returns the weights for its O.
__device__ inline MergeWeights DetMergeStats(float& total_max, float& total_sum, float part_max, float part_sum) {
  const float m = fmaxf(total_max, part_max);
  const MergeWeights w{__expf(total_max - m), __expf(part_max - m)};
  total_sum = __fmul_rn(total_sum, w.total) + __fmul_rn(part_sum, w.part);
  total_max = m;
  return w;
}
__device__ inline float DetMergeValue(float total_o, float part_o, MergeWeights w) {
  return __fmul_rn(total_o, w.total) + __fmul_rn(part_o, w.part);
}
// A row's output element from its merged O and sum.
__device__ inline float DetFinish(float o, float sum) { return __fmul_rn(o, 1.f / sum); }

// ---- the tile kernel ----


// One K/V tile of kKT keys in shared memory as bf16 bits, [key][d] as in the
// cache (prefill_attention.cu's KvTile at 16 keys), and, for the in-order
// runs, the rows' running O (fp32; each element read and written by the one
// lane that holds it in the C fragments, so no barrier guards it).
template <int HD>
struct Shared {
  alignas(16) uint16_t k[kKT][HD + kPad];
  alignas(16) uint16_t v[kKT][HD + kPad];
  float total_o[kRows][HD];
};

// The lane's 16-byte pieces of a K or V tile, in flight from global memory.
template <int HD>
struct TileLoads {
  static constexpr int kChunks = HD / kBf16PerVec;  // pieces per key
  static constexpr int kPerLane = kKT * kChunks / kWarpSize;
  uint4 piece[kPerLane];
};

// Keys [k0, k0 + kKT) of the sequence (table) for KV head kvh from `cache`;
// keys at or past ctx are zeros (they are masked for every row).
template <int HD>
__device__ void LoadTile(const PagedAttentionArgs& a, const bf16* cache, const int32_t* table, int kvh, int k0,
                         int ctx, TileLoads<HD>& in) {
  constexpr int kChunks = TileLoads<HD>::kChunks;
#pragma unroll
  for (int i = 0; i < TileLoads<HD>::kPerLane; ++i) {
    const int c = threadIdx.x + i * kWarpSize, key = k0 + c / kChunks, col = (c % kChunks) * kBf16PerVec;
    in.piece[i] = uint4{0u, 0u, 0u, 0u};
    if (key < ctx) in.piece[i] = LoadBf16x8(cache + (KeySlot(table, key, a.block_size) * a.num_kv_heads + kvh) * HD + col, 0);
  }
}
template <int HD>
__device__ void StoreTile(const TileLoads<HD>& in, uint16_t (*rows)[HD + kPad]) {
  constexpr int kChunks = TileLoads<HD>::kChunks;
#pragma unroll
  for (int i = 0; i < TileLoads<HD>::kPerLane; ++i) {
    const int c = threadIdx.x + i * kWarpSize;
    StoreBits(&rows[c / kChunks][(c % kChunks) * kBf16PerVec], in.piece[i]);
  }
}

// The block's rows: n positions of one sequence × the g query heads of KV
// head kvh; row r is position pos_begin + r / g (token row_begin + r / g),
// query head kvh · g + r % g. Rows past n · g are unused.
struct RowTile {
  int64_t row_begin;
  int n, pos_begin, seq;
};

// One partition's online softmax of the lane's rows g and g + 8 (index 0, 1).
template <int HD>
struct RowState {
  float o[HD / 8][4];  // O in C fragments: n-tile nd = dims 8nd .. 8nd + 7
  float max[2];        // running max of the scaled scores (−∞: no visible key yet)
  float sum[2];        // this lane's part of Σ e^(s − max)
  __device__ void Reset() {
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
    max[0] = max[1] = -CUDART_INF_F;
    sum[0] = sum[1] = 0.f;
  }
};

// S = Q·Kᵀ for the 16 rows and the tile's kKT keys (k0 ..), scaled, keys past
// a row's position masked to −∞; then the online-softmax step of `st` (its sum
// and O rescaled) and P = e^(S − max) into s, in S's C-fragment layout.
template <int HD>
__device__ void ScoreTile(const Shared<HD>& sh, const uint32_t (&q)[HD / 16][4], float scale, int k0,
                          const int (&row_pos)[2], RowState<HD>& st, float (&s)[kKT / 8][4]) {
  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kKT / 8; ++nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {  // the head dim in order, from zero
      const uint32_t b[2] = {Load32(&sh.k[nt * 8 + g][kk * 16 + 2 * t]), Load32(&sh.k[nt * 8 + g][kk * 16 + 2 * t + 8])};
      MmaBf16M16N8K16(s[nt], q[kk], b, s[nt]);
    }
  }
  float tile_max[2] = {-CUDART_INF_F, -CUDART_INF_F};
#pragma unroll
  for (int nt = 0; nt < kKT / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = k0 + nt * 8 + 2 * t + (i & 1);
      const float v = KeyVisible(key, row_pos[i / 2]) ? __fmul_rn(s[nt][i], scale) : -CUDART_INF_F;
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
    st.sum[r] = __fmul_rn(st.sum[r], correction[r]);
  }
#pragma unroll
  for (int nt = 0; nt < kKT / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[nt][i] = __expf(s[nt][i] - use_max[i / 2]);
      st.sum[i / 2] += s[nt][i];
    }
  }
#pragma unroll
  for (int nd = 0; nd < HD / 8; ++nd) {
#pragma unroll
    for (int i = 0; i < 4; ++i) st.o[nd][i] = __fmul_rn(st.o[nd][i], correction[i / 2]);
  }
}

// O += P·V for the tile's kKT keys: P (two n8 tiles of S) is the A operand of
// one k16 step; B = V[keys][dims 8nd ..] pairs keys 2t, 2t + 1 (b[0]) and
// 2t + 8, 2t + 9 (b[1]) of dim g, the lower key in the low half.
template <int HD>
__device__ void AccumulateValues(const Shared<HD>& sh, const float (&s)[kKT / 8][4], RowState<HD>& st) {
  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const uint32_t p[4] = {PackFloatsBf16x2(s[0][0], s[0][1]), PackFloatsBf16x2(s[0][2], s[0][3]),
                         PackFloatsBf16x2(s[1][0], s[1][1]), PackFloatsBf16x2(s[1][2], s[1][3])};
#pragma unroll
  for (int nd = 0; nd < HD / 8; ++nd) {
    const int key = 2 * t, d = nd * 8 + g;
    const uint32_t b[2] = {uint32_t{sh.v[key][d]} | uint32_t{sh.v[key + 1][d]} << 16,
                           uint32_t{sh.v[key + 8][d]} | uint32_t{sh.v[key + 9][d]} << 16};
    MmaBf16M16N8K16(st.o[nd], p, b, st.o[nd]);
  }
}

// The block's RowTile; false when the block has no rows (a piece past its
// prefill tile's end).
__device__ inline bool ResolveTile(const PagedAttentionArgs& a, const DetAttentionRows& rows, int positions_per_tile,
                                   RowTile& tile) {
  if (rows.tiles != nullptr) {
    const int pieces = (kPrefillTileRows + positions_per_tile - 1) / positions_per_tile;
    const PrefillTile big = rows.tiles[blockIdx.x / pieces];
    const int first = static_cast<int>(blockIdx.x % pieces) * positions_per_tile;
    if (first >= big.rows) return false;
    tile = RowTile{int64_t{big.row_begin} + first, min(positions_per_tile, big.rows - first), big.pos_begin + first,
                   big.seq};
    return true;
  }
  const int64_t token = rows.first_decode + blockIdx.x;
  tile = RowTile{token, 1, a.positions[token], a.token_seq[token]};
  return true;
}

// grid: x = tile (a piece of a prefill tile, or a decode row), y = KV head,
// z = partition (split) or 1 (in order). One warp.
template <int HD>
__global__ void __launch_bounds__(kWarpSize) DetAttentionKernel(PagedAttentionArgs a, DetAttentionRows rows) {
  TPSERVE_SHARED(Shared<HD>, sh);
  const int group = a.num_heads / a.num_kv_heads, kvh = blockIdx.y;
  const int positions_per_tile = kRows / group;
  RowTile tile;
  if (!ResolveTile(a, rows, positions_per_tile, tile)) return;
  const int ctx = tile.pos_begin + tile.n;  // the tile reads keys [0, ctx)
  const int pk = rows.partition_keys;
  const int partitions = (ctx + pk - 1) / pk;
  const bool split = rows.max_partitions > 0;
  const int p_begin = split ? static_cast<int>(blockIdx.z) : 0;
  if (p_begin >= partitions) return;  // a split block past its token's context
  const int p_end = split ? p_begin + 1 : partitions;

  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  // The lane's rows g and g + 8: position (−1: unused, every key masked), query head, token row.
  int row_pos[2], head[2];
  int64_t token[2];
  bool used[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    used[r] = row < tile.n * group;
    row_pos[r] = used[r] ? tile.pos_begin + row / group : -1;
    head[r] = kvh * group + row % group;
    token[r] = tile.row_begin + row / group;
  }
  uint32_t q[HD / 16][4];
  {
    const int64_t width = int64_t{a.num_heads + 2 * a.num_kv_heads} * HD;
    const bf16* qrow[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) qrow[r] = used[r] ? a.qkv + token[r] * width + int64_t{head[r]} * HD : nullptr;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {  // A fragments (mma.cuh): rows g, g + 8; dims 2t, 2t + 8 of the step
      const int d = kk * 16 + 2 * t;
      q[kk][0] = qrow[0] ? Load32(qrow[0] + d) : 0u;
      q[kk][1] = qrow[1] ? Load32(qrow[1] + d) : 0u;
      q[kk][2] = qrow[0] ? Load32(qrow[0] + d + 8) : 0u;
      q[kk][3] = qrow[1] ? Load32(qrow[1] + d + 8) : 0u;
    }
  }

  const int64_t out_width = int64_t{a.num_heads} * HD;
  // Row r's output from O values (lane's C-fragment columns) and the row's sum.
  auto write_row = [&](int r, auto o_at, float sum) {
    if (!used[r]) return;
    bf16* out = a.out + token[r] * out_width + int64_t{head[r]} * HD;
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) {
      StoreBits(out + nd * 8 + 2 * t,
                PackFloatsBf16x2(DetFinish(o_at(nd, 0), sum), DetFinish(o_at(nd, 1), sum)));
    }
  };

  RowState<HD> st;
  st.Reset();
  float total_max[2] = {-CUDART_INF_F, -CUDART_INF_F}, total_sum[2] = {0.f, 0.f};  // in order: the merged partitions
  // A partition has ended: merge it into the total (in order), or write its
  // output (split, one partition) or its partial (split, several).
  auto end_partition = [&](int p) {
    const float sum[2] = {FragmentRowSum(st.sum[0]), FragmentRowSum(st.sum[1])};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      if (!split) {
        if (st.max[r] == -CUDART_INF_F) continue;  // no visible key in p (p > 0), or an unused row
        float* total = sh.total_o[row];
        if (p == 0) {
          total_max[r] = st.max[r];
          total_sum[r] = sum[r];
#pragma unroll
          for (int nd = 0; nd < HD / 8; ++nd) {
            total[nd * 8 + 2 * t] = st.o[nd][2 * r];
            total[nd * 8 + 2 * t + 1] = st.o[nd][2 * r + 1];
          }
        } else {
          const MergeWeights w = DetMergeStats(total_max[r], total_sum[r], st.max[r], sum[r]);
#pragma unroll
          for (int nd = 0; nd < HD / 8; ++nd) {
            for (int j = 0; j < 2; ++j) {
              total[nd * 8 + 2 * t + j] = DetMergeValue(total[nd * 8 + 2 * t + j], st.o[nd][2 * r + j], w);
            }
          }
        }
      } else if (partitions == 1) {
        write_row(r, [&](int nd, int j) { return st.o[nd][2 * r + j]; }, sum[r]);
      } else if (used[r]) {
        const SplitWorkspace ws =
            CarveWorkspace(rows.workspace, a.num_tokens - rows.first_decode, a.num_heads, HD, rows.max_partitions);
        const int64_t at = ((int64_t{blockIdx.x} * a.num_heads + head[r]) * rows.max_partitions + p);
#pragma unroll
        for (int nd = 0; nd < HD / 8; ++nd) {
          ws.out[at * HD + nd * 8 + 2 * t] = st.o[nd][2 * r];
          ws.out[at * HD + nd * 8 + 2 * t + 1] = st.o[nd][2 * r + 1];
        }
        if (t == 0) {
          ws.max[at] = st.max[r];
          ws.sum[at] = sum[r];
        }
      }
    }
    st.Reset();
  };

  Shared<HD>& kv = sh;
  const int32_t* table = a.block_tables + int64_t{tile.seq} * a.max_blocks_per_seq;
  const int first_key = p_begin * pk, end_key = min(p_end * pk, ctx);
  // Software pipeline (prefill_attention.cu's): V of a tile loads while its
  // scores are taken, K of the next while its values accumulate.
  TileLoads<HD> in;
  LoadTile<HD>(a, a.k_cache, table, kvh, first_key, ctx, in);
  StoreTile<HD>(in, kv.k);
  for (int k0 = first_key; k0 < end_key; k0 += kKT) {
    const bool more = k0 + kKT < end_key;
    LoadTile<HD>(a, a.v_cache, table, kvh, k0, ctx, in);
    __syncwarp();  // K of this tile stored; done reading V of the last one
    float s[kKT / 8][4];
    ScoreTile<HD>(kv, q, a.scale, k0, row_pos, st, s);
    StoreTile<HD>(in, kv.v);
    if (more) LoadTile<HD>(a, a.k_cache, table, kvh, k0 + kKT, ctx, in);
    __syncwarp();  // V of this tile stored; done reading its K
    AccumulateValues<HD>(kv, s, st);
    if (more) StoreTile<HD>(in, kv.k);
    if (!more || (k0 + kKT) % pk == 0) end_partition(k0 / pk);
  }
  if (!split) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float* total = sh.total_o[g + 8 * r];
      write_row(r, [&](int nd, int j) { return total[nd * 8 + 2 * t + j]; }, total_sum[r]);
    }
  }
}

// The split decode rows' partials merged in partition order: grid (decode
// row, query head); tokens whose context is one partition were written by
// the tile kernel.
__global__ void __launch_bounds__(64) DetMergeKernel(PagedAttentionArgs a, DetAttentionRows rows) {
  const int64_t token = rows.first_decode + blockIdx.x;
  const int h = blockIdx.y, hd = a.head_dim;
  const int partitions = (a.positions[token] + rows.partition_keys) / rows.partition_keys;  // ceil((pos + 1) / pk)
  if (partitions <= 1) return;
  const SplitWorkspace ws =
      CarveWorkspace(rows.workspace, a.num_tokens - rows.first_decode, a.num_heads, hd, rows.max_partitions);
  const int64_t first = (int64_t{blockIdx.x} * a.num_heads + h) * rows.max_partitions;
  bf16* out = a.out + token * int64_t{a.num_heads} * hd + int64_t{h} * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float total_max = ws.max[first], total_sum = ws.sum[first], o = ws.out[first * hd + d];
    for (int p = 1; p < partitions; ++p) {
      const MergeWeights w = DetMergeStats(total_max, total_sum, ws.max[first + p], ws.sum[first + p]);
      o = DetMergeValue(o, ws.out[(first + p) * hd + d], w);
    }
    out[d] = __float2bfloat16(DetFinish(o, total_sum));
  }
}

}  // namespace

bool DetAttentionCovers(int head_dim, int num_heads, int num_kv_heads) {
  return (head_dim == 64 || head_dim == 128) && num_kv_heads > 0 && num_heads % num_kv_heads == 0 &&
         num_heads / num_kv_heads <= kDetTileRows;
}

cudaError_t LaunchDetAttention(const PagedAttentionArgs& a, const DetAttentionRows& rows, cudaStream_t stream) {
  const auto aligned = [](const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
  const bool split = rows.max_partitions > 0;
  const int64_t decode_rows = a.num_tokens - rows.first_decode;
  if (!DetAttentionCovers(a.head_dim, a.num_heads, a.num_kv_heads) || a.num_kv_heads > 65535 ||
      a.block_size <= 0 || rows.partition_keys <= 0 || rows.partition_keys % kKT != 0 ||
      (rows.tiles != nullptr && split) || rows.num_tiles < 0 || decode_rows < 0 || rows.max_partitions > 65535 ||
      !aligned(a.k_cache, 16) || !aligned(a.v_cache, 16) || !aligned(a.qkv, 4) || !aligned(a.out, 4)) {
    return cudaErrorInvalidValue;
  }
  int64_t blocks = decode_rows;
  if (rows.tiles != nullptr) {
    const int positions_per_tile = kRows / (a.num_heads / a.num_kv_heads);
    blocks = rows.num_tiles * ((kPrefillTileRows + positions_per_tile - 1) / positions_per_tile);
  }
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7fffffff || (split && (rows.workspace == nullptr ||
                                        rows.workspace_floats < SplitDecodeWorkspaceFloats(decode_rows, a.num_heads,
                                                                                           a.head_dim,
                                                                                           rows.max_partitions)))) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.num_kv_heads),
                  split ? static_cast<unsigned>(rows.max_partitions) : 1u);
  if (a.head_dim == 64) {
    TPSERVE_LAUNCH(DetAttentionKernel<64>, grid, kWarpSize, 0, stream)(a, rows);
  } else {
    TPSERVE_LAUNCH(DetAttentionKernel<128>, grid, kWarpSize, 0, stream)(a, rows);
  }
  if (split) {
    if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
    const dim3 merge(static_cast<unsigned>(decode_rows), static_cast<unsigned>(a.num_heads));
    TPSERVE_LAUNCH(DetMergeKernel, merge, 64, 0, stream)(a, rows);
  }
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
