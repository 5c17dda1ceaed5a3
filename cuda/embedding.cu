#include "cuda/embedding.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// One block per token (grid-stride over tokens), threads along D.
__global__ void EmbeddingKernel(const int32_t* __restrict__ ids, int64_t T,
                                const __nv_bfloat16* __restrict__ table, int64_t Vs, int64_t D,
                                int64_t vocab_start, __nv_bfloat16* __restrict__ out) {
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
    __nv_bfloat16* o = out + t * D;
    if (row >= 0 && row < Vs) {
      const __nv_bfloat16* src = table + row * D;
      for (int64_t i = threadIdx.x; i < D; i += blockDim.x) o[i] = src[i];
    } else {
      for (int64_t i = threadIdx.x; i < D; i += blockDim.x) o[i] = __float2bfloat16(0.f);
    }
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const int32_t* ids, int64_t T, const __nv_bfloat16* table, int64_t Vs,
                            int64_t D, int64_t vocab_start, __nv_bfloat16* out, cudaStream_t stream) {
  if (T == 0 || D == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(T < 65535 ? T : 65535);
  TPSERVE_LAUNCH(EmbeddingKernel, blocks, kThreads, 0, stream)(ids, T, table, Vs, D, vocab_start, out);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
