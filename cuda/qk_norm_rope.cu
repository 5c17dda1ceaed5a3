#include "cuda/qk_norm_rope.cuh"
#include "cuda/norm_rope_rows.cuh"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 64;

// grid: QkNormRopeGridFor (x: T tokens, y: Hq + Hkv heads); one block per
// (token, head), the head held in shared memory as fp32 between the norm and
// the rotation.
__global__ void QkNormRopeKernel(__nv_bfloat16* __restrict__ qkv, const int32_t* __restrict__ positions,
                                 int num_heads, int num_kv_heads, int hd,
                                 const __nv_bfloat16* __restrict__ q_norm,
                                 const __nv_bfloat16* __restrict__ k_norm, float eps,
                                 const float* __restrict__ rope) {
  TPSERVE_SHARED_ARRAY(float, x, kMaxRopeHeadDim);  // [hd] this head, fp32
  const int64_t t = blockIdx.x;
  const int h = static_cast<int>(blockIdx.y);  // 0..Hq-1: q heads, Hq..Hq+Hkv-1: k heads
  const int64_t width = int64_t{num_heads + 2 * num_kv_heads} * hd;
  __nv_bfloat16* head = qkv + t * width + int64_t{h} * hd;
  const __nv_bfloat16* norm = h < num_heads ? q_norm : k_norm;

  float sq = 0.f;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    const float v = __bfloat162float(head[i]);
    x[i] = v;
    sq += v * v;
  }
  if (norm != nullptr) {  // uniform over the block: BlockSum's barriers are safe
    const float inv = rsqrtf(BlockSum(sq) / static_cast<float>(hd) + eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) x[i] = x[i] * inv * __bfloat162float(norm[i]);
  }
  __syncthreads();
  const int half = hd / 2;
  const float* cos = rope + static_cast<int64_t>(positions[t]) * hd;
  const float* sin = cos + half;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float a = x[i], b = x[i + half];
    head[i] = __float2bfloat16(a * cos[i] - b * sin[i]);
    head[i + half] = __float2bfloat16(b * cos[i] + a * sin[i]);
  }
}

// grid: (T tokens, Hq + 2 Hkv heads); block: a warp multiple >= hd / 2, thread
// i owns the pair (i, i + hd/2). Heads Hq + Hkv .. are v heads: copied to the
// cache only.
__global__ void QkNormRopeStoreKvKernel(__nv_bfloat16* __restrict__ qkv, const int32_t* __restrict__ positions,
                                        const int64_t* __restrict__ slot_mapping, int num_heads,
                                        int num_kv_heads, int hd, const __nv_bfloat16* __restrict__ q_norm,
                                        const __nv_bfloat16* __restrict__ k_norm, float eps,
                                        const float* __restrict__ rope, __nv_bfloat16* __restrict__ k_cache,
                                        __nv_bfloat16* __restrict__ v_cache) {
  TPSERVE_GRID_DEPENDENCY_WAIT();  // may be a programmatic launch
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  const int64_t t = blockIdx.x;
  const int h = static_cast<int>(blockIdx.y);
  const int i = static_cast<int>(threadIdx.x);
  const int64_t width = int64_t{num_heads + 2 * num_kv_heads} * hd, kv_row = int64_t{num_kv_heads} * hd;
  __nv_bfloat16* head = qkv + t * width + int64_t{h} * hd;
  const int64_t slot = slot_mapping[t];
  if (h >= num_heads + num_kv_heads) {  // a v head (uniform over the block)
    if (slot < 0) return;
    __nv_bfloat16* dst = v_cache + slot * kv_row + int64_t{h - num_heads - num_kv_heads} * hd;
    for (int j = i; j < hd; j += static_cast<int>(blockDim.x)) dst[j] = head[j];
    return;
  }
  // The q or k head: NormRopeHead, the math the QKV GEMV's fused epilogue
  // runs too (cuda/gemv.cu), so both store the same bits.
  const int32_t pos = positions[t];
  __nv_bfloat16* cache_row =
      h >= num_heads && slot >= 0 ? k_cache + slot * kv_row + int64_t{h - num_heads} * hd : nullptr;
  NormRopeHead(head, h < num_heads ? q_norm : k_norm, eps, hd, rope + static_cast<int64_t>(pos) * hd, cache_row);
}

}  // namespace

cudaError_t LaunchQkNormRope(__nv_bfloat16* qkv, int64_t T, const int32_t* positions,
                             int num_heads, int num_kv_heads, int head_dim,
                             const __nv_bfloat16* q_norm, const __nv_bfloat16* k_norm, float eps,
                             const float* rope, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  QkNormRopeGrid g;
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kMaxRopeHeadDim ||
      !QkNormRopeGridFor(T, num_heads, num_kv_heads, &g)) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(g.tokens, g.heads);
  TPSERVE_LAUNCH(QkNormRopeKernel, grid, kThreads, 0, stream)(qkv, positions, num_heads, num_kv_heads,
                                                              head_dim, q_norm, k_norm, eps, rope);
  return cudaGetLastError();
}

cudaError_t LaunchQkNormRopeStoreKv(__nv_bfloat16* qkv, int64_t T, const int32_t* positions,
                                    const int64_t* slot_mapping, int num_heads, int num_kv_heads, int head_dim,
                                    const __nv_bfloat16* q_norm, const __nv_bfloat16* k_norm, float eps,
                                    const float* rope, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                                    cudaStream_t stream, bool programmatic) {
  if (T == 0) return cudaSuccess;
  QkNormRopeGrid g;  // Hq + Hkv "query" heads and Hkv more: the q, k and v heads
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kMaxRopeHeadDim ||
      !QkNormRopeGridFor(T, num_heads + num_kv_heads, num_kv_heads, &g)) {
    return cudaErrorInvalidValue;
  }
  const int threads = (head_dim / 2 + 31) / 32 * 32;
  const dim3 grid(g.tokens, g.heads);
  TPSERVE_LAUNCH_PDL(grid, threads, 0, stream, programmatic, QkNormRopeStoreKvKernel)(
      qkv, positions, slot_mapping, num_heads, num_kv_heads, head_dim, q_norm, k_norm, eps, rope, k_cache, v_cache);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
