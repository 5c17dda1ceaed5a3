#include <math_constants.h>

#include "cuda/attention.cuh"
#include "cuda/attention_merge.h"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kGroupChunk = 8;  // query heads one block serves

// The query heads of one block: a chunk of up to kGroupChunk heads of KV head
// kvh's group. grid.y = KV head · group_chunks + chunk.
struct HeadChunk {
  int kvh;  // KV head
  int h0;   // first query head
  int nh;   // query heads (1 .. kGroupChunk)
};

__device__ HeadChunk BlockHeads(const PagedAttentionArgs& a, int group_chunks) {
  const int group = a.num_heads / a.num_kv_heads;
  const int kvh = blockIdx.y / group_chunks, chunk = blockIdx.y % group_chunks;
  return {kvh, kvh * group + chunk * kGroupChunk, min(kGroupChunk, group - chunk * kGroupChunk)};
}

// One softmax partial (attention_merge.h) per warp and query head of the chunk.
struct WarpPartials {
  float max[kGroupChunk][kWarps];
  float sum[kGroupChunk][kWarps];
  float out[kGroupChunk][kWarps][kMaxAttentionHeadDim];  // normalised rows
};

// Attention of token t's query heads `hc` over keys [begin, end) of its
// sequence. The block's warps split the keys (warp w takes begin + w,
// begin + w + 4, ...); lane l holds head dims l, l + 32, ... (DPL of them,
// hd <= 32 · DPL); each warp keeps an online softmax per query head (running
// max, sum and fp32 accumulator) and stores its partial in `sm`. A warp that
// saw no key stores (−∞, 0). Ends with __syncthreads: call from all threads.
template <int DPL>
__device__ void AttendKeys(const PagedAttentionArgs& a, int64_t t, HeadChunk hc, int begin, int end,
                           WarpPartials& sm) {
  const int hd = a.head_dim;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t width = int64_t{a.num_heads + 2 * a.num_kv_heads} * hd;
  const int64_t kv_row = int64_t{a.num_kv_heads} * hd;  // elements per slot
  const int32_t* table = a.block_tables + int64_t{a.token_seq[t]} * a.max_blocks_per_seq;

  float q[kGroupChunk][DPL], acc[kGroupChunk][DPL], run_max[kGroupChunk], run_sum[kGroupChunk];
#pragma unroll
  for (int g = 0; g < kGroupChunk; ++g) {
    run_max[g] = -CUDART_INF_F;
    run_sum[g] = 0.f;
#pragma unroll
    for (int k = 0; k < DPL; ++k) {
      const int d = lane + k * kWarpSize;
      q[g][k] = g < hc.nh && d < hd ? __bfloat162float(a.qkv[t * width + int64_t{hc.h0 + g} * hd + d]) * a.scale
                                    : 0.f;
      acc[g][k] = 0.f;
    }
  }

  for (int j = begin + warp; j < end; j += kWarps) {
    const int64_t slot = int64_t{table[j / a.block_size]} * a.block_size + j % a.block_size;
    const __nv_bfloat16* kp = a.k_cache + slot * kv_row + int64_t{hc.kvh} * hd;
    const __nv_bfloat16* vp = a.v_cache + slot * kv_row + int64_t{hc.kvh} * hd;
    float kd[DPL], vd[DPL];
#pragma unroll
    for (int k = 0; k < DPL; ++k) {
      const int d = lane + k * kWarpSize;
      kd[k] = d < hd ? __bfloat162float(kp[d]) : 0.f;
      vd[k] = d < hd ? __bfloat162float(vp[d]) : 0.f;
    }
#pragma unroll
    for (int g = 0; g < kGroupChunk; ++g) {
      if (g < hc.nh) {  // uniform over the block (the shuffles need the whole warp)
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < DPL; ++k) s += q[g][k] * kd[k];
        s = WarpSum(s);
        const float new_max = fmaxf(run_max[g], s);
        const float correction = __expf(run_max[g] - new_max);  // 0 on the first key
        const float p = __expf(s - new_max);
        run_sum[g] = run_sum[g] * correction + p;
#pragma unroll
        for (int k = 0; k < DPL; ++k) acc[g][k] = acc[g][k] * correction + p * vd[k];
        run_max[g] = new_max;
      }
    }
  }

#pragma unroll
  for (int g = 0; g < kGroupChunk; ++g) {
    if (g < hc.nh) {
      if (lane == 0) {
        sm.max[g][warp] = run_max[g];
        sm.sum[g][warp] = run_sum[g];
      }
      const float inv_sum = run_sum[g] > 0.f ? 1.f / run_sum[g] : 0.f;
#pragma unroll
      for (int k = 0; k < DPL; ++k) {
        const int d = lane + k * kWarpSize;
        if (d < hd) sm.out[g][warp][d] = acc[g][k] * inv_sum;
      }
    }
  }
  __syncthreads();
}

// Dimension d of query head g's output, merged over the warps.
__device__ float MergeWarps(const WarpPartials& sm, int g, int d) {
  return CombinePartials(sm.max[g], sm.sum[g], &sm.out[g][0][d], kMaxAttentionHeadDim, kWarps);
}

// The whole context of each token in one block. grid: x = token, y = KV head · group_chunks + chunk.
template <int DPL>
__global__ void __launch_bounds__(kThreads) PagedAttentionKernel(PagedAttentionArgs a, int group_chunks) {
  TPSERVE_SHARED(WarpPartials, sm);
  const int64_t t = blockIdx.x;
  const HeadChunk hc = BlockHeads(a, group_chunks);
  AttendKeys<DPL>(a, t, hc, 0, a.positions[t] + 1, sm);  // keys 0 .. positions[t]

  const int hd = a.head_dim;
  const int64_t out_width = int64_t{a.num_heads} * hd;
  for (int i = threadIdx.x; i < hc.nh * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    a.out[t * out_width + int64_t{hc.h0 + g} * hd + d] = __float2bfloat16(MergeWarps(sm, g, d));
  }
}

// Partition kernel. grid: x = decode token i (row first_token + i), y = KV head ·
// group_chunks + chunk, z = partition.
template <int DPL>
__global__ void __launch_bounds__(kThreads)
    SplitDecodePartitionKernel(PagedAttentionArgs a, SplitDecodeArgs split, int group_chunks) {
  const int64_t i = blockIdx.x, t = split.first_token + i;
  const int part = blockIdx.z, P = split.max_partitions;
  const int ctx = a.positions[t] + 1;
  const int begin = part * split.partition_size;
  if (begin >= ctx) return;  // past this token's context (the grid is sized for the longest)
  const int end = min(ctx, begin + split.partition_size);

  TPSERVE_SHARED(WarpPartials, sm);
  const HeadChunk hc = BlockHeads(a, group_chunks);
  AttendKeys<DPL>(a, t, hc, begin, end, sm);

  const int hd = a.head_dim;
  const SplitWorkspace ws = CarveWorkspace(split.workspace, a.num_tokens - split.first_token, a.num_heads, hd, P);
  for (int k = threadIdx.x; k < hc.nh * hd; k += blockDim.x) {
    const int g = k / hd, d = k % hd;
    const int64_t row = (i * a.num_heads + hc.h0 + g) * P + part;  // (token, head, partition)
    ws.out[row * hd + d] = MergeWarps(sm, g, d);
    if (d == 0) {  // the partition's stats: max over its keys and Σ e^(s − max)
      const SoftmaxStats<float> stats = MergeStats(sm.max[g], sm.sum[g], kWarps);
      ws.max[row] = stats.max;
      ws.sum[row] = stats.sum;
    }
  }
}

// Combine kernel. grid: x = decode token i, y = query head.
__global__ void __launch_bounds__(kThreads) SplitDecodeCombineKernel(PagedAttentionArgs a, SplitDecodeArgs split) {
  const int64_t i = blockIdx.x, t = split.first_token + i;
  const int h = blockIdx.y, P = split.max_partitions, hd = a.head_dim;
  const int ctx = a.positions[t] + 1;
  // The partitions the partition kernel wrote for this token (all non-empty).
  const int n = min(P, (ctx + split.partition_size - 1) / split.partition_size);
  const SplitWorkspace ws = CarveWorkspace(split.workspace, a.num_tokens - split.first_token, a.num_heads, hd, P);
  const int64_t first = (i * a.num_heads + h) * P;  // row of partition 0
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    const float o = CombinePartials(ws.max + first, ws.sum + first, ws.out + first * hd + d, hd, n);
    a.out[t * int64_t{a.num_heads} * hd + int64_t{h} * hd + d] = __float2bfloat16(o);
  }
}

bool ValidArgs(const PagedAttentionArgs& a) {
  return a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 && a.head_dim > 0 &&
         a.head_dim <= kMaxAttentionHeadDim && a.block_size > 0 && a.num_tokens <= 0x7fffffff;
}

int GroupChunks(const PagedAttentionArgs& a) {
  const int group = a.num_heads / a.num_kv_heads;
  return (group + kGroupChunk - 1) / kGroupChunk;
}

}  // namespace

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return cudaSuccess;
  if (!ValidArgs(a)) return cudaErrorInvalidValue;
  const int group_chunks = GroupChunks(a);
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.num_kv_heads * group_chunks));
  if (a.head_dim <= 32) {
    TPSERVE_LAUNCH(PagedAttentionKernel<1>, grid, kThreads, 0, stream)(a, group_chunks);
  } else if (a.head_dim <= 64) {
    TPSERVE_LAUNCH(PagedAttentionKernel<2>, grid, kThreads, 0, stream)(a, group_chunks);
  } else if (a.head_dim <= 128) {
    TPSERVE_LAUNCH(PagedAttentionKernel<4>, grid, kThreads, 0, stream)(a, group_chunks);
  } else {
    TPSERVE_LAUNCH(PagedAttentionKernel<8>, grid, kThreads, 0, stream)(a, group_chunks);
  }
  return cudaGetLastError();
}

size_t SplitDecodeWorkspaceFloats(int64_t num_decode_tokens, int num_heads, int head_dim, int max_partitions) {
  const int64_t rows = num_decode_tokens * num_heads * max_partitions;
  return static_cast<size_t>(rows * (head_dim + 2));  // out row + max + sum per (token, head, partition)
}

cudaError_t LaunchSplitDecodeAttention(const PagedAttentionArgs& a, const SplitDecodeArgs& split,
                                       cudaStream_t stream) {
  const int64_t n = a.num_tokens - split.first_token;
  if (n == 0) return cudaSuccess;
  if (!ValidArgs(a) || n < 0 || split.first_token < 0 || split.partition_size <= 0 ||
      split.max_partitions <= 0 || split.max_partitions > 65535 || split.workspace == nullptr ||
      split.workspace_floats < SplitDecodeWorkspaceFloats(n, a.num_heads, a.head_dim, split.max_partitions)) {
    return cudaErrorInvalidValue;
  }
  const int group_chunks = GroupChunks(a);
  if (a.num_kv_heads * group_chunks > 65535 || a.num_heads > 65535) return cudaErrorInvalidValue;
  const dim3 parts(static_cast<unsigned>(n), static_cast<unsigned>(a.num_kv_heads * group_chunks),
                   static_cast<unsigned>(split.max_partitions));
  if (a.head_dim <= 32) {
    TPSERVE_LAUNCH(SplitDecodePartitionKernel<1>, parts, kThreads, 0, stream)(a, split, group_chunks);
  } else if (a.head_dim <= 64) {
    TPSERVE_LAUNCH(SplitDecodePartitionKernel<2>, parts, kThreads, 0, stream)(a, split, group_chunks);
  } else if (a.head_dim <= 128) {
    TPSERVE_LAUNCH(SplitDecodePartitionKernel<4>, parts, kThreads, 0, stream)(a, split, group_chunks);
  } else {
    TPSERVE_LAUNCH(SplitDecodePartitionKernel<8>, parts, kThreads, 0, stream)(a, split, group_chunks);
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  const dim3 heads(static_cast<unsigned>(n), static_cast<unsigned>(a.num_heads));
  TPSERVE_LAUNCH(SplitDecodeCombineKernel, heads, kThreads, 0, stream)(a, split);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
