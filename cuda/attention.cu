#include <math_constants.h>

#include "cuda/attention.cuh"
#include "cuda/reduce.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kGroupChunk = 8;  // query heads one block serves

// DPL: head dims per lane (lane l holds dims l, l + 32, ...), hd <= 32 · DPL.
// grid: x = token, y = KV head · group_chunks + chunk.
template <int DPL>
__global__ void __launch_bounds__(kThreads) PagedAttentionKernel(PagedAttentionArgs a, int group_chunks) {
  __shared__ float sm_max[kWarps][kGroupChunk];                       // running max per warp, head
  __shared__ float sm_sum[kWarps][kGroupChunk];                       // Σ exp per warp, head
  __shared__ float sm_acc[kWarps][kGroupChunk][kMaxAttentionHeadDim];  // Σ p · v per warp, head

  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y / group_chunks;
  const int chunk = blockIdx.y % group_chunks;
  const int group = a.num_heads / a.num_kv_heads;
  const int h0 = kvh * group + chunk * kGroupChunk;           // first query head of this block
  const int nh = min(kGroupChunk, group - chunk * kGroupChunk);  // query heads in this block
  const int hd = a.head_dim;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t width = int64_t{a.num_heads + 2 * a.num_kv_heads} * hd;
  const int64_t kv_row = int64_t{a.num_kv_heads} * hd;  // elements per slot
  const int ctx = a.positions[t] + 1;                    // keys 0 .. positions[t]
  const int32_t* table = a.block_tables + int64_t{a.token_seq[t]} * a.max_blocks_per_seq;

  float q[kGroupChunk][DPL], acc[kGroupChunk][DPL], run_max[kGroupChunk], run_sum[kGroupChunk];
#pragma unroll
  for (int g = 0; g < kGroupChunk; ++g) {
    run_max[g] = -CUDART_INF_F;
    run_sum[g] = 0.f;
#pragma unroll
    for (int k = 0; k < DPL; ++k) {
      const int d = lane + k * kWarpSize;
      q[g][k] = g < nh && d < hd ? __bfloat162float(a.qkv[t * width + int64_t{h0 + g} * hd + d]) * a.scale
                                 : 0.f;
      acc[g][k] = 0.f;
    }
  }

  for (int j = warp; j < ctx; j += kWarps) {
    const int64_t slot = int64_t{table[j / a.block_size]} * a.block_size + j % a.block_size;
    const __nv_bfloat16* kp = a.k_cache + slot * kv_row + int64_t{kvh} * hd;
    const __nv_bfloat16* vp = a.v_cache + slot * kv_row + int64_t{kvh} * hd;
    float kd[DPL], vd[DPL];
#pragma unroll
    for (int k = 0; k < DPL; ++k) {
      const int d = lane + k * kWarpSize;
      kd[k] = d < hd ? __bfloat162float(kp[d]) : 0.f;
      vd[k] = d < hd ? __bfloat162float(vp[d]) : 0.f;
    }
#pragma unroll
    for (int g = 0; g < kGroupChunk; ++g) {
      if (g < nh) {  // uniform over the block (the shuffles need the whole warp)
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

  // Merge the warps: out = Σ_w acc_w · e^(m_w − M) / Σ_w sum_w · e^(m_w − M).
#pragma unroll
  for (int g = 0; g < kGroupChunk; ++g) {
    if (g < nh) {
      if (lane == 0) {
        sm_max[warp][g] = run_max[g];
        sm_sum[warp][g] = run_sum[g];
      }
#pragma unroll
      for (int k = 0; k < DPL; ++k) {
        const int d = lane + k * kWarpSize;
        if (d < hd) sm_acc[warp][g][d] = acc[g][k];
      }
    }
  }
  __syncthreads();
  const int64_t out_width = int64_t{a.num_heads} * hd;
  for (int i = threadIdx.x; i < nh * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    float m = -CUDART_INF_F;
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm_max[w][g]);  // finite: warp 0 saw key 0
    float num = 0.f, den = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = __expf(sm_max[w][g] - m);  // 0 for a warp that saw no key
      num += sm_acc[w][g][d] * f;
      den += sm_sum[w][g] * f;
    }
    a.out[t * out_width + int64_t{h0 + g} * hd + d] = __float2bfloat16(num / den);
  }
}

}  // namespace

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return cudaSuccess;
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.head_dim <= 0 ||
      a.head_dim > kMaxAttentionHeadDim || a.block_size <= 0 || a.num_tokens > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  const int group = a.num_heads / a.num_kv_heads;
  const int group_chunks = (group + kGroupChunk - 1) / kGroupChunk;
  const dim3 grid(static_cast<unsigned>(a.num_tokens),
                  static_cast<unsigned>(a.num_kv_heads * group_chunks));
  if (a.head_dim <= 32) {
    PagedAttentionKernel<1><<<grid, kThreads, 0, stream>>>(a, group_chunks);
  } else if (a.head_dim <= 64) {
    PagedAttentionKernel<2><<<grid, kThreads, 0, stream>>>(a, group_chunks);
  } else if (a.head_dim <= 128) {
    PagedAttentionKernel<4><<<grid, kThreads, 0, stream>>>(a, group_chunks);
  } else {
    PagedAttentionKernel<8><<<grid, kThreads, 0, stream>>>(a, group_chunks);
  }
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
