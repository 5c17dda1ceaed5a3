#include "cuda/convert.h"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void F32ToBf16Kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out,
                                int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void Bf16ToF32Kernel(const __nv_bfloat16* __restrict__ in, float* __restrict__ out,
                                int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __bfloat162float(in[i]);
  }
}

int GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

cudaError_t F32ToBf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPSERVE_LAUNCH(F32ToBf16Kernel, GridFor(n), kThreads, 0, stream)(in, out, n);
  return cudaGetLastError();
}

cudaError_t Bf16ToF32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TPSERVE_LAUNCH(Bf16ToF32Kernel, GridFor(n), kThreads, 0, stream)(in, out, n);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
