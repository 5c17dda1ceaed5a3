#include "cuda/reduce.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row. Each thread reads back only the elements it wrote itself,
// so in-place use (out == x) is safe.
__global__ void RmsNormKernel(const __nv_bfloat16* x, const __nv_bfloat16* __restrict__ w,
                              float eps, int64_t D, __nv_bfloat16* out) {
  const __nv_bfloat16* xr = x + blockIdx.x * D;
  __nv_bfloat16* o = out + blockIdx.x * D;
  float sq = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = __bfloat162float(xr[i]);
    sq += v * v;
  }
  const float inv = rsqrtf(BlockSum(sq) / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    o[i] = __float2bfloat16(__bfloat162float(xr[i]) * inv * __bfloat162float(w[i]));
  }
}

__global__ void AddRmsNormKernel(__nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ residual,
                                 const __nv_bfloat16* __restrict__ w, float eps, int64_t D) {
  __nv_bfloat16* xr = x + blockIdx.x * D;
  __nv_bfloat16* rr = residual + blockIdx.x * D;
  float sq = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const __nv_bfloat16 sum = __float2bfloat16(__bfloat162float(rr[i]) + __bfloat162float(xr[i]));
    rr[i] = sum;
    const float v = __bfloat162float(sum);  // the statistics see what is stored
    sq += v * v;
  }
  const float inv = rsqrtf(BlockSum(sq) / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    xr[i] = __float2bfloat16(__bfloat162float(rr[i]) * inv * __bfloat162float(w[i]));
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const __nv_bfloat16* x, const __nv_bfloat16* w, float eps, int64_t M,
                          int64_t D, __nv_bfloat16* out, cudaStream_t stream) {
  if (M == 0 || D == 0) return cudaSuccess;
  if (M > 0x7fffffff) return cudaErrorInvalidValue;
  TPSERVE_LAUNCH(RmsNormKernel, static_cast<unsigned>(M), kThreads, 0, stream)(x, w, eps, D, out);
  return cudaGetLastError();
}

cudaError_t LaunchAddRmsNorm(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w,
                             float eps, int64_t M, int64_t D, cudaStream_t stream) {
  if (M == 0 || D == 0) return cudaSuccess;
  if (M > 0x7fffffff) return cudaErrorInvalidValue;
  TPSERVE_LAUNCH(AddRmsNormKernel, static_cast<unsigned>(M), kThreads, 0, stream)(x, residual, w, eps, D);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
