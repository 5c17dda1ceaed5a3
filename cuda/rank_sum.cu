#include "cuda/rank_sum.cuh"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float ToFloat(float v) { return v; }
__device__ inline void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ inline void Store(float* p, float v) { *p = v; }

// One thread per element (grid-stride): the ranks' values added in rank order.
template <typename T>
__global__ void __launch_bounds__(kThreads) SumRanksKernel(const T* gathered, int ranks, int64_t n, T* out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float sum = ToFloat(gathered[i]);
    for (int r = 1; r < ranks; ++r) sum = sum + ToFloat(gathered[r * n + i]);
    Store(out + i, sum);
  }
}

template <typename T>
cudaError_t Launch(const T* gathered, int ranks, int64_t n, T* out, cudaStream_t stream) {
  if (ranks < 1 || n < 0 || (n > 0 && (gathered == nullptr || out == nullptr))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const int64_t blocks = GridStrideBlocks(n, kThreads);
  TPSERVE_LAUNCH(SumRanksKernel<T>, static_cast<unsigned>(blocks), kThreads, 0, stream)(gathered, ranks, n, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSumRanksBf16(const __nv_bfloat16* gathered, int ranks, int64_t n, __nv_bfloat16* out,
                               cudaStream_t stream) {
  return Launch(gathered, ranks, n, out, stream);
}
cudaError_t LaunchSumRanksF32(const float* gathered, int ranks, int64_t n, float* out, cudaStream_t stream) {
  return Launch(gathered, ranks, n, out, stream);
}

}  // namespace tpserve::cuda
