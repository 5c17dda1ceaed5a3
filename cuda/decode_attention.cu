#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention_merge.h"
#include "cuda/decode_attention.cuh"
#include "cuda/decode_plan.h"
#include "cuda/mma.cuh"
#include "cuda/prefill_tiles.h"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kDims = kBf16PerVec;  // bf16 dims per thread of a row: one 16-byte load
constexpr int kInFlight = kDecodeKeysInFlight;

// The instantiation: head_dim and GQA group (query heads per KV head).
template <int HD, int G>
struct DecodeShape {
  static constexpr int kHeadDim = HD;
  static constexpr int kGroup = G;
  static constexpr int kThreadsPerRow = HD / kDims;       // a row's subgroup (8, 16 or 32 lanes)
  static constexpr int kRows = kThreads / kThreadsPerRow;  // rows the block holds at once
  static constexpr int kPartials = kRows;                  // softmax partials the block merges: one per subgroup
  static_assert(HD % kDims == 0 && kThreadsPerRow <= kWarpSize && kWarpSize % kThreadsPerRow == 0);
};

// The per-launch constants besides PagedAttentionArgs.
struct DecodeLaunch {
  int64_t first_token;  // decode token i is row first_token + i
  int64_t num_decode;   // n
  DecodePlan plan;
  float* workspace;     // CarveWorkspace(n, Hq, hd, plan.splits) when plan.splits > 1
  uint32_t* arrivals;   // [n, Hkv] busy blocks of each (token, KV head) done so far; zero between launches
};

// Where a block of kernel 1 is: decode token i (step row t), KV head, split
// z, and its token's context (keys) and busy blocks (decode_plan.h).
struct DecodeBlock {
  int64_t i, t;
  int kvh, z;
  int ctx, used;
};

__device__ inline DecodeBlock ThisDecodeBlock(const PagedAttentionArgs& a, const DecodeLaunch& l) {
  DecodeBlock b;
  b.i = blockIdx.x;
  b.t = l.first_token + b.i;
  b.kvh = blockIdx.y;
  b.z = blockIdx.z;
  b.ctx = a.positions[b.t] + 1;
  b.used = DecodeUsedSplits(b.ctx, l.plan);
  return b;
}

// fn(begin, end) for each partition (keys [begin, end)) block z owns.
template <class Fn>
__device__ __forceinline__ void ForOwnedPartitions(const DecodeBlock& b, const DecodePlan& plan, Fn&& fn) {
  const int parts = DecodePartitions(b.ctx, plan);
  for (int p = b.z; p < parts; p += plan.splits) {
    const int begin = p * plan.partition_size;
    fn(begin, min(b.ctx, begin + plan.partition_size));
  }
}


// Before a programmatic launch's wait (cuda/simt.cuh): asks L2 for the K and
// V lines of the first keys of block z's first partition, so that the cache
// reads start while the previous kernel finishes. Safe before the wait: the
// positions and the block table come from the step's upload, a copy that
// completed before the previous kernel began, and the previous kernel
// (q/k-norm + RoPE + KV store) writes only this step's own slot, whose lines
// L2 holds coherently; the loads after the wait read every key again. One
// 128-byte line per thread and cache: 8192 / HD keys (64 at head_dim 128).
template <int HD>
__device__ __forceinline__ void PrefetchFirstKeys(const PagedAttentionArgs& a, const DecodeBlock& b,
                                                  const DecodePlan& plan) {
  constexpr int kLines = HD * 2 / 128;  // lines of one key's row of one KV head
  static_assert(HD % 64 == 0, "rows of whole 128-byte lines");
  if (b.z >= b.used) return;
  const int begin = b.z * plan.partition_size;
  const int key = begin + static_cast<int>(threadIdx.x) / kLines;
  if (key >= min(b.ctx, begin + plan.partition_size)) return;
  const int32_t* table = a.block_tables + int64_t{a.token_seq[b.t]} * a.max_blocks_per_seq;
  const int64_t at = KeySlot(table, key, a.block_size) * (int64_t{a.num_kv_heads} * HD) + int64_t{b.kvh} * HD +
                     (threadIdx.x % kLines) * 64;
  PrefetchL2Bf16x8(a.k_cache + at, 0);
  PrefetchL2Bf16x8(a.v_cache + at, 0);
}

// A subgroup's online softmax over the keys it saw, for the G query heads of
// its slice (8 dims) of the row.
template <class S>
struct OnlineSoftmax {
  float max[S::kGroup];
  float sum[S::kGroup];
  float acc[S::kGroup][kDims];  // Σ e^(s − max) · v, this thread's 8 dims
};

// Folds kInFlight rows (K and V slices of this thread; valid[u] false past
// the partition) into `st`. q holds the scaled query slices. Every lane of the
// warp calls this together (the score sum shuffles within the subgroup).
template <class S>
__device__ __forceinline__ void FoldRows(const float (&q)[S::kGroup][kDims], const uint4 (&k)[kInFlight],
                                         const uint4 (&v)[kInFlight], const bool (&valid)[kInFlight],
                                         OnlineSoftmax<S>& st) {
  constexpr int G = S::kGroup;
  float s[kInFlight][G];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) {
    float kf[kDims];
    UnpackBf16x8(k[u], kf);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float dot = 0.f;
#pragma unroll
      for (int d = 0; d < kDims; ++d) dot += q[g][d] * kf[d];
#pragma unroll
      for (int off = S::kThreadsPerRow / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      s[u][g] = valid[u] ? dot : -CUDART_INF_F;
    }
  }
  // One rescale per kInFlight keys: the new max over them, then e^(s − max).
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float m = st.max[g];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) m = fmaxf(m, s[u][g]);
    const bool any = m > -CUDART_INF_F;  // false until this subgroup's first key
    const float correction = any ? __expf(st.max[g] - m) : 1.f;
    st.sum[g] *= correction;
#pragma unroll
    for (int d = 0; d < kDims; ++d) st.acc[g][d] *= correction;
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) s[u][g] = any ? __expf(s[u][g] - m) : 0.f;  // e^(−∞) = 0 past the end
    st.max[g] = m;
  }
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) {
    float vf[kDims];
    UnpackBf16x8(v[u], vf);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      st.sum[g] += s[u][g];
#pragma unroll
      for (int d = 0; d < kDims; ++d) st.acc[g][d] += s[u][g] * vf[d];
    }
  }
}

// The partials of one block (S::kPartials: the SIMT kernel's subgroups, the
// tensor-core kernel's warps), and their merge weights.
template <class S>
struct BlockPartials {
  float max[S::kGroup][S::kPartials];
  float sum[S::kGroup][S::kPartials];
  float weight[S::kGroup][S::kPartials];  // w_r / Σ w (attention_merge.h)
  float total_max[S::kGroup];
  float total_sum[S::kGroup];
  float out[S::kGroup][S::kPartials][S::kHeadDim];  // normalised rows
};

// The last block of a (token, KV head): merges the `used` partials of each of
// its G query heads (attention_merge.h; split z of head h is workspace row
// (i · Hq + h) · splits + z) into the bf16 output, in split order whichever
// block arrived last, so the bits do not depend on the order blocks finish.
// Contains __syncthreads: call from every thread.
template <class S>
__device__ void MergeSplits(const PagedAttentionArgs& a, const DecodeLaunch& l, const DecodeBlock& b,
                            const SplitWorkspace& ws, BlockPartials<S>& sm) {
  constexpr int G = S::kGroup, HD = S::kHeadDim;
  TPSERVE_SHARED_ARRAY(float, weight, kDecodeMaxSplits);  // w_p / Σ w of the head being merged
  const int splits = l.plan.splits, used = b.used;
  const int64_t row0 = (b.i * a.num_heads + int64_t{b.kvh} * G) * splits;  // head g's split z: row0 + g · splits + z
  __nv_bfloat16* out_row = a.out + b.t * int64_t{a.num_heads} * HD + int64_t{b.kvh} * G * HD;
  if (threadIdx.x < G) {  // head g's union stats (MergeStats, loading from L2)
    const int64_t first = row0 + int64_t{threadIdx.x} * splits;
    float m = -CUDART_INF_F;
    for (int p = 0; p < used; ++p) {
      const float mp = __ldcg(ws.max + first + p), sp = __ldcg(ws.sum + first + p);
      if (sp > 0.f && mp > m) m = mp;
    }
    float total = 0.f;
    for (int p = 0; p < used; ++p) total += PartialWeight(__ldcg(ws.max + first + p), __ldcg(ws.sum + first + p), m);
    sm.total_max[threadIdx.x] = m;
    sm.total_sum[threadIdx.x] = total;
  }
  for (int g = 0; g < G; ++g) {
    __syncthreads();  // the stats are there; `weight` is free again
    const int64_t first = row0 + int64_t{g} * splits;
    const float inv_total = sm.total_sum[g] > 0.f ? 1.f / sm.total_sum[g] : 0.f;
    for (int p = threadIdx.x; p < used; p += kThreads) {
      weight[p] = PartialWeight(__ldcg(ws.max + first + p), __ldcg(ws.sum + first + p), sm.total_max[g]) * inv_total;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < HD; d += kThreads) {
      float o = 0.f;
      for (int p = 0; p < used; ++p) {
        if (weight[p] > 0.f) o += weight[p] * __ldcg(ws.out + (first + p) * HD + d);  // an empty partial's row is never read
      }
      out_row[int64_t{g} * HD + d] = __float2bfloat16(o);
    }
  }
}

// Merges the partials the block's threads stored in `sm` and writes the
// block's result: the bf16 output rows of its G query heads when its token's
// context used one block, else the block's partial (row (i · Hq + h) · splits
// + z) in the workspace, after which the last of the token's busy blocks to
// finish merges them all (MergeSplits): no combine kernel. Contains
// __syncthreads: call from every thread.
template <class S>
__device__ void MergeAndWrite(const PagedAttentionArgs& a, const DecodeLaunch& l, const DecodeBlock& b,
                              BlockPartials<S>& sm) {
  constexpr int G = S::kGroup, HD = S::kHeadDim, R = S::kPartials;
  const bool direct = b.used == 1;
  const int h0 = b.kvh * G, splits = l.plan.splits;
  __nv_bfloat16* out_row = a.out + b.t * int64_t{a.num_heads} * HD + int64_t{h0} * HD;
  const SplitWorkspace ws = direct ? SplitWorkspace{nullptr, nullptr, nullptr}
                                   : CarveWorkspace(l.workspace, l.num_decode, a.num_heads, HD, splits);
  const int64_t ws_row0 = (b.i * a.num_heads + h0) * splits + b.z;
  __syncthreads();
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    const SoftmaxStats<float> all = MergeStats(sm.max[g], sm.sum[g], R);
    const float inv_total = all.sum > 0.f ? 1.f / all.sum : 0.f;
    for (int r = 0; r < R; ++r) sm.weight[g][r] = PartialWeight(sm.max[g][r], sm.sum[g][r], all.max) * inv_total;
    sm.total_max[g] = all.max;
    sm.total_sum[g] = all.sum;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * HD; e += kThreads) {
    const int g = e / HD, d = e % HD;
    float o = 0.f;
    for (int r = 0; r < R; ++r) {
      if (sm.weight[g][r] > 0.f) o += sm.weight[g][r] * sm.out[g][r][d];  // an empty partial's row is never read
    }
    if (direct) {
      out_row[int64_t{g} * HD + d] = __float2bfloat16(o);
    } else {
      const int64_t row = ws_row0 + int64_t{g} * splits;
      ws.out[row * HD + d] = o;
      if (d == 0) {
        ws.max[row] = sm.total_max[g];
        ws.sum[row] = sm.total_sum[g];
      }
    }
  }
  // `direct` is uniform over the block; the last busy block of the (token,
  // KV head) to arrive merges (reduce.cuh's LastBlockToArrive).
  uint32_t* counter = l.arrivals + b.i * a.num_kv_heads + b.kvh;
  if (direct || !LastBlockToArrive(counter, static_cast<uint32_t>(b.used))) return;
  MergeSplits<S>(a, l, b, ws, sm);
}

// The subgroup's softmax partial into the block's shared partials (row `sub`).
template <class S>
__device__ void StashPartial(const OnlineSoftmax<S>& st, int sub, int slice, BlockPartials<S>& sm) {
#pragma unroll
  for (int g = 0; g < S::kGroup; ++g) {
    if (slice == 0) {
      sm.max[g][sub] = st.max[g];
      sm.sum[g][sub] = st.sum[g];
    }
    const float inv = st.sum[g] > 0.f ? 1.f / st.sum[g] : 0.f;
#pragma unroll
    for (int d = 0; d < kDims; ++d) sm.out[g][sub][slice * kDims + d] = st.acc[g][d] * inv;
  }
}

// grid: x = decode token i, y = KV head, z = split (decode_plan.h).
// May be a programmatic launch: waits before anything
// but the step's metadata and the first keys' L2 prefetch.
template <class S>
__global__ void __launch_bounds__(kThreads) FastDecodeKernel(PagedAttentionArgs a, DecodeLaunch l) {
  constexpr int G = S::kGroup, HD = S::kHeadDim;
  const DecodeBlock b = ThisDecodeBlock(a, l);
  PrefetchFirstKeys<HD>(a, b, l.plan);
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  if (b.z >= b.used) return;  // no partition of this context is ours (uniform: before any barrier)
  const int64_t t = b.t;
  const int kvh = b.kvh;

  TPSERVE_SHARED(BlockPartials<S>, sm);
  const int sub = threadIdx.x / S::kThreadsPerRow, slice = threadIdx.x % S::kThreadsPerRow;
  const int64_t width = int64_t{a.num_heads + 2 * a.num_kv_heads} * HD;
  const int64_t kv_row = int64_t{a.num_kv_heads} * HD;  // elements per cache slot
  const int32_t* table = a.block_tables + int64_t{a.token_seq[t]} * a.max_blocks_per_seq;
  const __nv_bfloat16* k_base = a.k_cache + int64_t{kvh} * HD + slice * kDims;
  const __nv_bfloat16* v_base = a.v_cache + int64_t{kvh} * HD + slice * kDims;

  float q[G][kDims];
  OnlineSoftmax<S> st;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    UnpackBf16x8(LoadBf16x8(a.qkv + t * width + int64_t{kvh * G + g} * HD + slice * kDims, 0), q[g]);
#pragma unroll
    for (int d = 0; d < kDims; ++d) {
      q[g][d] *= a.scale;
      st.acc[g][d] = 0.f;
    }
    st.max[g] = -CUDART_INF_F;
    st.sum[g] = 0.f;
  }

  ForOwnedPartitions(b, l.plan, [&](int begin, int end) {
    for (int j0 = begin; j0 < end; j0 += S::kRows * kInFlight) {
      uint4 kr[kInFlight], vr[kInFlight];
      bool valid[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {  // every load issued before any is used
        const int j = j0 + u * S::kRows + sub;
        valid[u] = j < end;
        kr[u] = uint4{};
        vr[u] = uint4{};
        if (valid[u]) {
          const int64_t slot = KeySlot(table, j, a.block_size);
          kr[u] = LoadBf16x8(k_base + slot * kv_row, 0);
          vr[u] = LoadBf16x8(v_base + slot * kv_row, 0);
        }
      }
      FoldRows<S>(q, kr, vr, valid, st);
    }
  });
  StashPartial<S>(st, sub, slice, sm);
  MergeAndWrite<S>(a, l, b, sm);
}

// ---- the tensor-core variant (DecodeVariant::kMma, decode_attention.cuh) ----

constexpr int kWarps = kThreads / kWarpSize;
// Blocks of the tensor-core kernel per SM its registers must allow
// (__launch_bounds__): 3 caps them at 168 a thread (65,536 / (3 x 128),
// in allocation units), 12 warps per SM where 180 registers held 8.
constexpr int kMmaBlocksPerSm = 3;
constexpr int kChunkKeys = 16;  // keys of a chunk: the k of one p·v mma, two n-tiles of q·k

template <int HD, int G>
struct MmaShape {
  static constexpr int kHeadDim = HD;
  static constexpr int kGroup = G;
  static constexpr int kPartials = kWarps;       // one softmax partial per warp
  static constexpr int kSlabsK = HD / 32;        // 16-byte K loads per key and lane (32-dim slabs)
  static constexpr int kSlabsV = HD / 64;        // 16-byte V loads per key and lane (64-dim slabs)
  static constexpr int kNTiles = HD / 8;         // n-tiles of p·v (8 dims each)
  static constexpr int kChunks = HD == 64 ? 2 : 1;  // chunks per warp and iteration: 8 K + 8 V loads in flight
  static constexpr int kWarpKeys = kChunks * kChunkKeys;
  static_assert(G <= 8 && HD % 64 == 0, "query heads fill rows 0..7 of the A operand; whole 64-dim slabs");
};

// A warp's online softmax, lane (g, t): query head g (rows g >= G are zero
// padding), p·v columns 2t and 2t + 1 of each n-tile.
template <class S>
struct MmaSoftmax {
  // O[head g][dim] of n-tile nd = 8 · slab + j, column n = 2t + i: dim
  // 64 · slab + 8n + j (MmaValueDim); rows 8..15 of D are dropped.
  float o[S::kNTiles][2];
  float max;  // running max of head g's scores (the same on the row's 4 lanes)
  float sum;  // this lane's part of Σ e^(s − max) (summed over the 4 lanes at the end)
};

__device__ __forceinline__ int MmaValueDim(int nd, int column) { return 64 * (nd / 8) + 8 * column + nd % 8; }

// One chunk of keys [c0, c0 + 16) in flight, lane (g, t); zeros past `end`.
template <class S>
struct ChunkLoads {
  uint4 k[2][S::kSlabsK];  // keys c0 + g, c0 + 8 + g (q·k n-tiles 0, 1); dims 32m + 8t .. + 7
  uint4 v[4][S::kSlabsV];  // keys c0 + 2t, + 1, + 8, + 9 (p·v k rows); dims 64s + 8g .. + 7
};

// A chunk's K loads: keys c0 + g and c0 + 8 + g, lane (g, t).
template <class S>
__device__ __forceinline__ void LoadChunkK(const __nv_bfloat16* k_head, int64_t kv_row, const int32_t* table,
                                           int block_size, int c0, int end, ChunkLoads<S>& in) {
  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const int key = c0 + 8 * n + g;
    const __nv_bfloat16* row = key < end ? k_head + KeySlot(table, key, block_size) * kv_row : nullptr;
#pragma unroll
    for (int m = 0; m < S::kSlabsK; ++m) in.k[n][m] = row ? LoadBf16x8(row + 32 * m + 8 * t, 0) : uint4{};
  }
}

// Its V loads: keys c0 + 2t, + 1, + 8, + 9, lane (g, t).
template <class S>
__device__ __forceinline__ void LoadChunkV(const __nv_bfloat16* v_head, int64_t kv_row, const int32_t* table,
                                           int block_size, int c0, int end, ChunkLoads<S>& in) {
  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int key = c0 + 2 * t + (r & 1) + 8 * (r >> 1);
    const __nv_bfloat16* row = key < end ? v_head + KeySlot(table, key, block_size) * kv_row : nullptr;
#pragma unroll
    for (int sl = 0; sl < S::kSlabsV; ++sl) in.v[r][sl] = row ? LoadBf16x8(row + 64 * sl + 8 * g, 0) : uint4{};
  }
}

// A warp's place in its block's keys: steps of kWarpKeys keys at
// c0 = begin + warp · kWarpKeys, + kWarps · kWarpKeys, ... of each partition
// [begin, end) the block owns (z, z + splits, ...; decode_plan.h), partition
// after partition. Warp-uniform.
struct WarpCursor {
  int part;  // the partition of the step
  int c0;    // its first key
  int end;   // the partition's end
};

// From cursor.part on, the first partition that reaches `offset` keys past
// its start: the warp's step there. False when none is left.
__device__ __forceinline__ bool SeekPartition(WarpCursor& c, const DecodeBlock& b, const DecodePlan& plan,
                                              int offset) {
  const int parts = DecodePartitions(b.ctx, plan);
  for (; c.part < parts; c.part += plan.splits) {
    const int begin = c.part * plan.partition_size;
    c.end = min(b.ctx, begin + plan.partition_size);
    c.c0 = begin + offset;
    if (c.c0 < c.end) return true;
  }
  return false;
}

// The warp's next step after c (false when it has none left).
template <class S>
__device__ __forceinline__ bool NextStep(WarpCursor& c, const DecodeBlock& b, const DecodePlan& plan, int warp) {
  c.c0 += kWarps * S::kWarpKeys;
  if (c.c0 < c.end) return true;
  c.part += plan.splits;
  return SeekPartition(c, b, plan, warp * S::kWarpKeys);
}
// acc += row g of A · B for an A whose rows 8..15 are zero (a0, a2: the lane's
// a[0], a[2]); D's rows 8..15 are dropped, so they hold no registers.
__device__ __forceinline__ void MmaUpperRows(float (&acc)[2], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  const uint32_t a[4] = {a0, 0u, a2, 0u}, b[2] = {b0, b1};
  const float c[4] = {acc[0], acc[1], 0.f, 0.f};
  float d[4];
  MmaBf16M16N8K16(d, a, b, c);
  acc[0] = d[0];
  acc[1] = d[1];
}

// Scores of the chunk, scaled: s[n][i] = head g's score of key c0 + 8n + 2t + i
// (−∞ past `end`). q_frag[m · 32 + lane]: the lane's 16-byte load of head g's
// dims 32m + 8t .. (shared memory, [kSlabsK, 32]), in the permuted k order of
// the K loads: chunk 2m is words (x, y), 2m + 1 (z, w).
template <class S>
__device__ __forceinline__ void ScoreChunk(const uint4* q_frag, const ChunkLoads<S>& in, float scale, int c0, int end,
                                           float (&s)[2][2]) {
  const int lane = threadIdx.x % kWarpSize, t = lane % 4;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    float acc[2] = {0.f, 0.f};
#pragma unroll
    for (int m = 0; m < S::kSlabsK; ++m) {
      const uint4 qm = q_frag[m * kWarpSize + lane];
      MmaUpperRows(acc, qm.x, qm.y, in.k[n][m].x, in.k[n][m].y);
      MmaUpperRows(acc, qm.z, qm.w, in.k[n][m].z, in.k[n][m].w);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) s[n][i] = c0 + 8 * n + 2 * t + i < end ? acc[i] * scale : -CUDART_INF_F;
  }
}

// The two bf16 of dim `j` (0..7) of two 16-byte rows, `lo`'s in the low half.
__device__ __forceinline__ uint32_t PairDim(const uint4& lo, const uint4& hi, int j) {
  const uint32_t x = j < 2 ? lo.x : j < 4 ? lo.y : j < 6 ? lo.z : lo.w;
  const uint32_t y = j < 2 ? hi.x : j < 4 ? hi.y : j < 6 ? hi.z : hi.w;
  return j % 2 == 0 ? (x & 0xffffu) | (y << 16) : (x >> 16) | (y & 0xffff0000u);
}

// O += P · V of the chunk: P (bf16, head g's keys 2t, 2t + 1 and 2t + 8, 2t + 9
// from s) is the A operand; n-tile (slab, j) of B pairs dim 64 · slab + 8g + j
// of the lane's keys.
template <class S>
__device__ __forceinline__ void AccumulateChunk(const ChunkLoads<S>& in, const float (&p)[2][2], MmaSoftmax<S>& st) {
  const uint32_t a0 = PackFloatsBf16x2(p[0][0], p[0][1]), a2 = PackFloatsBf16x2(p[1][0], p[1][1]);
#pragma unroll
  for (int sl = 0; sl < S::kSlabsV; ++sl) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      MmaUpperRows(st.o[8 * sl + j], a0, a2, PairDim(in.v[0][sl], in.v[1][sl], j),
                   PairDim(in.v[2][sl], in.v[3][sl], j));
    }
  }
}

// The online-softmax step over a warp iteration's scores: s becomes
// P = e^(s − max), O and the sum are rescaled once.
template <class S>
__device__ __forceinline__ void FoldScores(float (&s)[S::kChunks][2][2], MmaSoftmax<S>& st) {
  float tile_max = -CUDART_INF_F;
#pragma unroll
  for (int u = 0; u < S::kChunks; ++u) {
    tile_max = fmaxf(tile_max, fmaxf(fmaxf(s[u][0][0], s[u][0][1]), fmaxf(s[u][1][0], s[u][1][1])));
  }
  const RowRescale r = RaiseRowMax(st.max, FragmentRowMax(tile_max));
  st.sum *= r.correction;
#pragma unroll
  for (int nd = 0; nd < S::kNTiles; ++nd) {
    st.o[nd][0] *= r.correction;
    st.o[nd][1] *= r.correction;
  }
#pragma unroll
  for (int u = 0; u < S::kChunks; ++u) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float& v = s[u][e / 2][e % 2];
      v = __expf(v - r.use_max);
      st.sum += v;
    }
  }
}

// The warp's partial into the block's shared partials (row `warp`).
template <class S>
__device__ void StashWarpPartial(const MmaSoftmax<S>& st, int warp, BlockPartials<S>& sm) {
  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const float sum = FragmentRowSum(st.sum);  // every lane: shuffles
  if (g >= S::kGroup) return;
  if (t == 0) {
    sm.max[g][warp] = st.max;
    sm.sum[g][warp] = sum;
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int nd = 0; nd < S::kNTiles; ++nd) {
#pragma unroll
    for (int i = 0; i < 2; ++i) sm.out[g][warp][MmaValueDim(nd, 2 * t + i)] = st.o[nd][i] * inv;
  }
}

// grid: x = decode token i, y = KV head, z = split (as FastDecodeKernel).
template <class S>
__global__ void __launch_bounds__(kThreads, kMmaBlocksPerSm) FastDecodeMmaKernel(PagedAttentionArgs a, DecodeLaunch l) {
  constexpr int G = S::kGroup, HD = S::kHeadDim;
  const DecodeBlock b = ThisDecodeBlock(a, l);
  PrefetchFirstKeys<HD>(a, b, l.plan);
  TPSERVE_GRID_DEPENDENCY_WAIT();  // a programmatic launch, as FastDecodeKernel
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  if (b.z >= b.used) return;  // uniform: before any barrier
  TPSERVE_SHARED(BlockPartials<S>, sm);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const int64_t width = int64_t{a.num_heads + 2 * a.num_kv_heads} * HD;
  const int64_t kv_row = int64_t{a.num_kv_heads} * HD;  // elements per cache slot
  const int32_t* table = a.block_tables + int64_t{a.token_seq[b.t]} * a.max_blocks_per_seq;
  const __nv_bfloat16* k_head = a.k_cache + int64_t{b.kvh} * HD;
  const __nv_bfloat16* v_head = a.v_cache + int64_t{b.kvh} * HD;

  // Head g's A fragments, lane by lane (zero rows past the group): the same
  // for every warp, so in shared memory rather than 4 x kSlabsK registers a
  // thread (what lets kMmaBlocksPerSm blocks fit without spilling). Warp 0
  // writes them before the barrier.
  TPSERVE_SHARED_ARRAY(uint4, q_frag, S::kSlabsK * kWarpSize);
  const __nv_bfloat16* q_row = a.qkv + b.t * width + int64_t{b.kvh * G + g} * HD;
  if (warp == 0) {
#pragma unroll
    for (int m = 0; m < S::kSlabsK; ++m) {
      q_frag[m * kWarpSize + lane] = g < G ? LoadBf16x8(q_row + 32 * m + 8 * t, 0) : uint4{};
    }
  }
  __syncthreads();
  MmaSoftmax<S> st;
#pragma unroll
  for (int nd = 0; nd < S::kNTiles; ++nd) st.o[nd][0] = st.o[nd][1] = 0.f;
  st.max = -CUDART_INF_F;
  st.sum = 0.f;

  // The warp's steps, software pipelined: K rows of step n + 1 are requested
  // once step n's scores are taken, V rows once its P · V is done, so a
  // step's loads fly behind the previous step's math in the same registers.
  WarpCursor cur{b.z, 0, 0};
  bool more = SeekPartition(cur, b, l.plan, warp * S::kWarpKeys);
  ChunkLoads<S> in[S::kChunks];
  if (more) {
#pragma unroll
    for (int u = 0; u < S::kChunks; ++u) {
      LoadChunkK<S>(k_head, kv_row, table, a.block_size, cur.c0 + u * kChunkKeys, cur.end, in[u]);
      LoadChunkV<S>(v_head, kv_row, table, a.block_size, cur.c0 + u * kChunkKeys, cur.end, in[u]);
    }
  }
  while (more) {  // warp-uniform
    WarpCursor next = cur;
    const bool more_next = NextStep<S>(next, b, l.plan, warp);
    float s[S::kChunks][2][2];
#pragma unroll
    for (int u = 0; u < S::kChunks; ++u) ScoreChunk<S>(q_frag, in[u], a.scale, cur.c0 + u * kChunkKeys, cur.end, s[u]);
    if (more_next) {
#pragma unroll
      for (int u = 0; u < S::kChunks; ++u) {
        LoadChunkK<S>(k_head, kv_row, table, a.block_size, next.c0 + u * kChunkKeys, next.end, in[u]);
      }
    }
    FoldScores<S>(s, st);
#pragma unroll
    for (int u = 0; u < S::kChunks; ++u) AccumulateChunk<S>(in[u], s[u], st);
    if (more_next) {
#pragma unroll
      for (int u = 0; u < S::kChunks; ++u) {
        LoadChunkV<S>(v_head, kv_row, table, a.block_size, next.c0 + u * kChunkKeys, next.end, in[u]);
      }
    }
    cur = next;
    more = more_next;
  }
  StashWarpPartial<S>(st, warp, sm);
  MergeAndWrite<S>(a, l, b, sm);
}

dim3 PartitionGrid(const PagedAttentionArgs& a, const DecodeLaunch& l) {
  return dim3(static_cast<unsigned>(l.num_decode), static_cast<unsigned>(a.num_kv_heads),
              static_cast<unsigned>(l.plan.splits));
}

// The launch of kernel 1 for a shape of either variant.
template <int HD, int G>
cudaError_t Launch(DecodeShape<HD, G>, const PagedAttentionArgs& a, const DecodeLaunch& l, cudaStream_t stream,
                   bool programmatic) {
  using S = DecodeShape<HD, G>;
  TPSERVE_LAUNCH_PDL(PartitionGrid(a, l), kThreads, 0, stream, programmatic, FastDecodeKernel<S>)(a, l);
  return cudaGetLastError();
}
template <int HD, int G>
cudaError_t Launch(MmaShape<HD, G>, const PagedAttentionArgs& a, const DecodeLaunch& l, cudaStream_t stream,
                   bool programmatic) {
  using S = MmaShape<HD, G>;
  TPSERVE_LAUNCH_PDL(PartitionGrid(a, l), kThreads, 0, stream, programmatic, FastDecodeMmaKernel<S>)(a, l);
  return cudaGetLastError();
}

template <int HD, int G>
const void* KernelOf(DecodeShape<HD, G>) {
  return reinterpret_cast<const void*>(&FastDecodeKernel<DecodeShape<HD, G>>);
}
template <int HD, int G>
const void* KernelOf(MmaShape<HD, G>) {
  return reinterpret_cast<const void*>(&FastDecodeMmaKernel<MmaShape<HD, G>>);
}

// Keys a block folds per iteration of its loop (FastDecodeBlockKeys): the
// SIMT kernel's rows at once times the rows in flight, the tensor-core
// kernel's warps times their keys per step.
template <int HD, int G>
int BlockKeys(DecodeShape<HD, G>) {
  return DecodeShape<HD, G>::kRows * kInFlight;
}
template <int HD, int G>
int BlockKeys(MmaShape<HD, G>) {
  return kWarps * MmaShape<HD, G>::kWarpKeys;
}

template <class S>
int BlocksPerSm() {
  static const int blocks = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, KernelOf(S{}), kThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 1;
    }
    return n < 1 ? 1 : n;
  }();
  return blocks;
}

// fn(MmaShape<hd, group>{}) for a shape the tensor-core kernel is instantiated
// for, else `otherwise`.
template <class R, class Fn>
R ForMmaShape(int hd, int group, R otherwise, Fn&& fn) {
  const auto for_group = [&](auto hd_tag) -> R {
    constexpr int HD = decltype(hd_tag)::value;
    switch (group) {
      case 4: return fn(MmaShape<HD, 4>{});
      case 8: return fn(MmaShape<HD, 8>{});
      default: return otherwise;
    }
  };
  switch (hd) {  // 256: the SIMT kernel (O, q and a chunk's K/V in registers would spill)
    case 64: return for_group(std::integral_constant<int, 64>{});
    case 128: return for_group(std::integral_constant<int, 128>{});
    default: return otherwise;
  }
}

// fn(DecodeShape<hd, group>{}) for an instantiated shape, else `otherwise`.
template <class R, class Fn>
R ForShape(int hd, int group, R otherwise, Fn&& fn) {
  const auto for_group = [&](auto hd_tag) -> R {
    constexpr int HD = decltype(hd_tag)::value;
    switch (group) {
      case 1: return fn(DecodeShape<HD, 1>{});
      case 2: return fn(DecodeShape<HD, 2>{});
      case 4: return fn(DecodeShape<HD, 4>{});
      case 8: return fn(DecodeShape<HD, 8>{});
      default: return otherwise;
    }
  };
  switch (hd) {
    case 64: return for_group(std::integral_constant<int, 64>{});
    case 128: return for_group(std::integral_constant<int, 128>{});
    case 256: return for_group(std::integral_constant<int, 256>{});
    default: return otherwise;
  }
}

// fn(shape) for the kernel of `variant` instantiated for (hd, group), else `otherwise`.
template <class R, class Fn>
R ForVariant(DecodeVariant variant, int hd, int group, R otherwise, Fn&& fn) {
  return variant == DecodeVariant::kMma ? ForMmaShape(hd, group, otherwise, fn) : ForShape(hd, group, otherwise, fn);
}

}  // namespace

bool FastDecodeCovers(const PagedAttentionArgs& a) {
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return false;
  const int group = a.num_heads / a.num_kv_heads;
  return (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) &&
         (group == 1 || group == 2 || group == 4 || group == 8) && Aligned16(a.qkv) && Aligned16(a.k_cache) &&
         Aligned16(a.v_cache);
}

const char* DecodeVariantName(DecodeVariant variant) { return variant == DecodeVariant::kMma ? "mma" : "simt"; }

bool FastDecodeHasVariant(DecodeVariant variant, int head_dim, int group) {
  return ForVariant(variant, head_dim, group, false, [](auto) { return true; });
}

DecodeVariant FastDecodeVariant(int head_dim, int group) {
  return FastDecodeHasVariant(DecodeVariant::kMma, head_dim, group) ? DecodeVariant::kMma : DecodeVariant::kSimt;
}

int FastDecodeBlocksPerSm(DecodeVariant variant, int head_dim, int group) {
  return ForVariant(variant, head_dim, group, 0, [](auto shape) { return BlocksPerSm<decltype(shape)>(); });
}

int FastDecodeBlocksPerSm(int head_dim, int group) {
  return FastDecodeBlocksPerSm(FastDecodeVariant(head_dim, group), head_dim, group);
}

size_t FastDecodeWorkspaceFloats(int64_t num_decode_tokens, int num_heads, int head_dim, const DecodePlan& plan) {
  return plan.splits > 1 ? SplitDecodeWorkspaceFloats(num_decode_tokens, num_heads, head_dim, plan.splits) : 0;
}

int FastDecodeBlockKeys(DecodeVariant variant, int head_dim, int group) {
  return ForVariant(variant, head_dim, group, 0, [](auto shape) { return BlockKeys(shape); });
}

int FastDecodeBlockKeys(int head_dim, int group) {
  return FastDecodeBlockKeys(FastDecodeVariant(head_dim, group), head_dim, group);
}

cudaError_t LaunchFastDecodeAttention(const PagedAttentionArgs& a, int64_t first_token, const DecodePlan& plan,
                                      float* workspace, size_t workspace_floats, uint32_t* arrivals,
                                      cudaStream_t stream, bool programmatic) {
  const DecodeVariant variant = a.num_kv_heads > 0 ? FastDecodeVariant(a.head_dim, a.num_heads / a.num_kv_heads)
                                                   : DecodeVariant::kSimt;  // refused below
  return LaunchFastDecodeAttention(variant, a, first_token, plan, workspace, workspace_floats, arrivals, stream,
                                   programmatic);
}

cudaError_t LaunchFastDecodeAttention(DecodeVariant variant, const PagedAttentionArgs& a, int64_t first_token,
                                      const DecodePlan& plan, float* workspace, size_t workspace_floats,
                                      uint32_t* arrivals, cudaStream_t stream, bool programmatic) {
  const int64_t n = a.num_tokens - first_token;
  if (first_token < 0 || n < 0 || a.num_tokens > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!FastDecodeCovers(a) || !FastDecodeHasVariant(variant, a.head_dim, a.num_heads / a.num_kv_heads)) {
    return cudaErrorNotSupported;
  }
  if (a.block_size <= 0 || a.num_kv_heads > 65535 || a.num_heads > 65535 || plan.splits < 1 ||
      plan.splits > kDecodeMaxSplits || plan.partition_size < 1) {
    return cudaErrorInvalidValue;
  }
  const size_t need = FastDecodeWorkspaceFloats(n, a.num_heads, a.head_dim, plan);
  if (need > 0 && (workspace == nullptr || workspace_floats < need || arrivals == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const DecodeLaunch l{first_token, n, plan, workspace, arrivals};
  return ForVariant(variant, a.head_dim, a.num_heads / a.num_kv_heads, cudaErrorNotSupported,
                    [&](auto shape) { return Launch(shape, a, l, stream, programmatic); });
}

}  // namespace tpserve::cuda
