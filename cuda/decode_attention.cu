#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention_merge.h"
#include "cuda/decode_attention.cuh"
#include "cuda/decode_plan.h"
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
  static_assert(HD % kDims == 0 && kThreadsPerRow <= kWarpSize && kWarpSize % kThreadsPerRow == 0);
};

// The per-launch constants besides PagedAttentionArgs.
struct DecodeLaunch {
  int64_t first_token;  // decode token i is row first_token + i
  int64_t num_decode;   // n
  DecodePlan plan;
  float* workspace;     // CarveWorkspace(n, Hq, hd, plan.splits) when plan.splits > 1
};


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

// The subgroups' partials of one block, and their merge weights.
template <class S>
struct BlockPartials {
  float max[S::kGroup][S::kRows];
  float sum[S::kGroup][S::kRows];
  float weight[S::kGroup][S::kRows];  // w_r / Σ w (attention_merge.h)
  float total_max[S::kGroup];
  float total_sum[S::kGroup];
  float out[S::kGroup][S::kRows][S::kHeadDim];  // normalised rows
};

// Merges the subgroups' partials in shared memory and writes the block's
// result: the bf16 output row of each query head when `direct`, else the
// block's partial (row `ws_row0 + g · splits`) in the workspace. Contains
// __syncthreads: call from every thread.
template <class S>
__device__ void MergeAndWrite(const OnlineSoftmax<S>& st, BlockPartials<S>& sm, int sub, int slice, bool direct,
                              __nv_bfloat16* out_row, const SplitWorkspace& ws, int64_t ws_row0, int splits) {
  constexpr int G = S::kGroup, HD = S::kHeadDim;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (slice == 0) {
      sm.max[g][sub] = st.max[g];
      sm.sum[g][sub] = st.sum[g];
    }
    const float inv = st.sum[g] > 0.f ? 1.f / st.sum[g] : 0.f;
#pragma unroll
    for (int d = 0; d < kDims; ++d) sm.out[g][sub][slice * kDims + d] = st.acc[g][d] * inv;
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    const SoftmaxStats<float> all = MergeStats(sm.max[g], sm.sum[g], S::kRows);
    const float inv_total = all.sum > 0.f ? 1.f / all.sum : 0.f;
    for (int r = 0; r < S::kRows; ++r) sm.weight[g][r] = PartialWeight(sm.max[g][r], sm.sum[g][r], all.max) * inv_total;
    sm.total_max[g] = all.max;
    sm.total_sum[g] = all.sum;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * HD; e += kThreads) {
    const int g = e / HD, d = e % HD;
    float o = 0.f;
    for (int r = 0; r < S::kRows; ++r) {
      if (sm.weight[g][r] > 0.f) o += sm.weight[g][r] * sm.out[g][r][d];  // an empty subgroup's row is never read
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
}

// grid: x = decode token i, y = KV head, z = split (decode_plan.h).
template <class S>
// May be a programmatic launch (as the combine kernel): waits before anything.
__global__ void __launch_bounds__(kThreads) FastDecodeKernel(PagedAttentionArgs a, DecodeLaunch l) {
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  constexpr int G = S::kGroup, HD = S::kHeadDim;
  const int64_t i = blockIdx.x, t = l.first_token + i;
  const int kvh = blockIdx.y, z = blockIdx.z;
  const int ctx = a.positions[t] + 1;
  const int used = DecodeUsedSplits(ctx, l.plan);
  if (z >= used) return;  // no partition of this context is ours (uniform: before any barrier)

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

  const int parts = DecodePartitions(ctx, l.plan);
  for (int p = z; p < parts; p += l.plan.splits) {  // the partitions this block owns
    const int begin = p * l.plan.partition_size, end = min(ctx, begin + l.plan.partition_size);
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
          const int64_t slot = int64_t{table[j / a.block_size]} * a.block_size + j % a.block_size;
          kr[u] = LoadBf16x8(k_base + slot * kv_row, 0);
          vr[u] = LoadBf16x8(v_base + slot * kv_row, 0);
        }
      }
      FoldRows<S>(q, kr, vr, valid, st);
    }
  }

  const SplitWorkspace ws = used > 1 ? CarveWorkspace(l.workspace, l.num_decode, a.num_heads, HD, l.plan.splits)
                                     : SplitWorkspace{nullptr, nullptr, nullptr};
  const int h0 = kvh * G;
  MergeAndWrite<S>(st, sm, sub, slice, used == 1, a.out + t * int64_t{a.num_heads} * HD + int64_t{h0} * HD, ws,
                   (i * a.num_heads + h0) * l.plan.splits + z, l.plan.splits);
}

// grid: x = decode token i, y = query head. Merges the token's used partials.
__global__ void __launch_bounds__(kThreads) FastDecodeCombineKernel(PagedAttentionArgs a, DecodeLaunch l) {
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  const int64_t i = blockIdx.x, t = l.first_token + i;
  const int h = blockIdx.y, hd = a.head_dim, splits = l.plan.splits;
  const int used = DecodeUsedSplits(a.positions[t] + 1, l.plan);
  if (used == 1) return;  // the partition kernel wrote this token's output
  TPSERVE_SHARED_ARRAY(float, weight, kDecodeMaxSplits);
  const SplitWorkspace ws = CarveWorkspace(l.workspace, l.num_decode, a.num_heads, hd, splits);
  const int64_t first = (i * a.num_heads + h) * splits;  // row of split 0
  const SoftmaxStats<float> all = MergeStats(ws.max + first, ws.sum + first, used);
  const float inv_total = all.sum > 0.f ? 1.f / all.sum : 0.f;
  for (int p = threadIdx.x; p < used; p += blockDim.x) {
    weight[p] = PartialWeight(ws.max[first + p], ws.sum[first + p], all.max) * inv_total;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.f;
    for (int p = 0; p < used; ++p) {
      if (weight[p] > 0.f) o += weight[p] * ws.out[(first + p) * hd + d];
    }
    a.out[t * int64_t{a.num_heads} * hd + int64_t{h} * hd + d] = __float2bfloat16(o);
  }
}

template <class S>
cudaError_t Launch(const PagedAttentionArgs& a, const DecodeLaunch& l, cudaStream_t stream, bool programmatic) {
  const dim3 grid(static_cast<unsigned>(l.num_decode), static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(l.plan.splits));
  TPSERVE_LAUNCH_PDL(grid, kThreads, 0, stream, programmatic, FastDecodeKernel<S>)(a, l);
  return cudaGetLastError();
}

template <class S>
int BlocksPerSm() {
  static const int blocks = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, reinterpret_cast<const void*>(&FastDecodeKernel<S>),
                                                      kThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 1;
    }
    return n < 1 ? 1 : n;
  }();
  return blocks;
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

}  // namespace

bool FastDecodeCovers(const PagedAttentionArgs& a) {
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return false;
  const int group = a.num_heads / a.num_kv_heads;
  return (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) &&
         (group == 1 || group == 2 || group == 4 || group == 8) && Aligned16(a.qkv) && Aligned16(a.k_cache) &&
         Aligned16(a.v_cache);
}

int FastDecodeBlocksPerSm(int head_dim, int group) {
  return ForShape(head_dim, group, 0, [](auto shape) { return BlocksPerSm<decltype(shape)>(); });
}

size_t FastDecodeWorkspaceFloats(int64_t num_decode_tokens, int num_heads, int head_dim, const DecodePlan& plan) {
  return plan.splits > 1 ? SplitDecodeWorkspaceFloats(num_decode_tokens, num_heads, head_dim, plan.splits) : 0;
}

cudaError_t LaunchFastDecodeAttention(const PagedAttentionArgs& a, int64_t first_token, const DecodePlan& plan,
                                      float* workspace, size_t workspace_floats, cudaStream_t stream,
                                      bool programmatic) {
  const int64_t n = a.num_tokens - first_token;
  if (first_token < 0 || n < 0 || a.num_tokens > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!FastDecodeCovers(a)) return cudaErrorNotSupported;
  if (a.block_size <= 0 || a.num_kv_heads > 65535 || a.num_heads > 65535 || plan.splits < 1 ||
      plan.splits > kDecodeMaxSplits || plan.partition_size < 1) {
    return cudaErrorInvalidValue;
  }
  const size_t need = FastDecodeWorkspaceFloats(n, a.num_heads, a.head_dim, plan);
  if (need > 0 && (workspace == nullptr || workspace_floats < need)) return cudaErrorInvalidValue;
  const DecodeLaunch l{first_token, n, plan, workspace};
  const cudaError_t err = ForShape(a.head_dim, a.num_heads / a.num_kv_heads, cudaErrorNotSupported,
                                   [&](auto shape) { return Launch<decltype(shape)>(a, l, stream, programmatic); });
  if (err != cudaSuccess || plan.splits == 1) return err;
  const dim3 heads(static_cast<unsigned>(n), static_cast<unsigned>(a.num_heads));
  TPSERVE_LAUNCH_PDL(heads, kThreads, 0, stream, programmatic, FastDecodeCombineKernel)(a, l);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
