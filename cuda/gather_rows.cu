#include "cuda/gather_rows.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// May be a programmatic launch: waits for the previous kernel (which wrote x)
// before reading anything.
__global__ void GatherRowsKernel(const __nv_bfloat16* __restrict__ x, int64_t D,
                                 const int32_t* __restrict__ rows, int64_t S,
                                 __nv_bfloat16* __restrict__ out) {
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  for (int64_t s = blockIdx.x; s < S; s += gridDim.x) {
    const __nv_bfloat16* src = x + static_cast<int64_t>(rows[s]) * D;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) out[s * D + i] = src[i];
  }
}

}  // namespace

cudaError_t LaunchGatherRows(const __nv_bfloat16* x, int64_t D, const int32_t* rows, int64_t S,
                             __nv_bfloat16* out, cudaStream_t stream, bool programmatic) {
  if (S == 0 || D == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(S < 65535 ? S : 65535);
  TPSERVE_LAUNCH_PDL(blocks, kThreads, 0, stream, programmatic, GatherRowsKernel)(x, D, rows, S, out);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
