#include "cuda/reduce.cuh"
#include "cuda/silu_mul.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void SiluMulKernel(const __nv_bfloat16* __restrict__ gate_up, int64_t M, int64_t F,
                              __nv_bfloat16* __restrict__ out) {
  const int64_t n = M * F;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i / F, f = i % F;
    const float g = __bfloat162float(gate_up[m * 2 * F + f]);
    const float u = __bfloat162float(gate_up[m * 2 * F + F + f]);
    out[i] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
  }
}

__global__ void AddBiasKernel(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ bias,
                              int64_t M, int64_t N) {
  const int64_t n = M * N;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = __float2bfloat16(__bfloat162float(y[i]) + __bfloat162float(bias[i % N]));
  }
}

}  // namespace

cudaError_t LaunchSiluMul(const __nv_bfloat16* gate_up, int64_t M, int64_t F, __nv_bfloat16* out,
                          cudaStream_t stream) {
  if (M * F == 0) return cudaSuccess;
  TPSERVE_LAUNCH(SiluMulKernel, GridStrideBlocks(M * F, kThreads), kThreads, 0, stream)(gate_up, M, F, out);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(__nv_bfloat16* y, const __nv_bfloat16* bias, int64_t M, int64_t N,
                          cudaStream_t stream) {
  if (M * N == 0) return cudaSuccess;
  TPSERVE_LAUNCH(AddBiasKernel, GridStrideBlocks(M * N, kThreads), kThreads, 0, stream)(y, bias, M, N);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
