#include "cuda/kv_store.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 128;

// One block per token (grid-stride over tokens), threads along Hkv · hd.
__global__ void StoreKvKernel(const __nv_bfloat16* __restrict__ qkv, int64_t T,
                              const int64_t* __restrict__ slot_mapping, int64_t q_cols,
                              int64_t kv_row, __nv_bfloat16* __restrict__ k_cache,
                              __nv_bfloat16* __restrict__ v_cache) {
  const int64_t width = q_cols + 2 * kv_row;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;  // uniform over the block
    const __nv_bfloat16* k = qkv + t * width + q_cols;
    const __nv_bfloat16* v = k + kv_row;
    for (int64_t i = threadIdx.x; i < kv_row; i += blockDim.x) {
      k_cache[slot * kv_row + i] = k[i];
      v_cache[slot * kv_row + i] = v[i];
    }
  }
}

}  // namespace

cudaError_t LaunchStoreKv(const __nv_bfloat16* qkv, int64_t T, const int64_t* slot_mapping,
                          int num_heads, int num_kv_heads, int head_dim, __nv_bfloat16* k_cache,
                          __nv_bfloat16* v_cache, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(T < 65535 ? T : 65535);
  TPSERVE_LAUNCH(StoreKvKernel, blocks, kThreads, 0, stream)(qkv, T, slot_mapping,
                                                             int64_t{num_heads} * head_dim,
                                                             int64_t{num_kv_heads} * head_dim, k_cache, v_cache);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
