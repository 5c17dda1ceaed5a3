#include "cuda/mma.cuh"
#include "cuda/mma_selftest.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

// One warp: lane (g, t) = (lane / 4, lane % 4) gathers its fragments as
// cuda/mma.cuh lays them out, runs the mma and scatters D.
__global__ void MmaSelfTestKernel(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  uint32_t a[4], b[2];
  float c[4], d[4];
  a[0] = PackBf16x2(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
  a[1] = PackBf16x2(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
  a[2] = PackBf16x2(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
  a[3] = PackBf16x2(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
  b[0] = PackBf16x2(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
  b[1] = PackBf16x2(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  for (int i = 0; i < 4; ++i) c[i] = C[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)];
  MmaBf16M16N8K16(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = d[i];
}

}  // namespace

cudaError_t LaunchMmaSelfTest(const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, float* d,
                              cudaStream_t stream) {
  TPSERVE_LAUNCH(MmaSelfTestKernel, 1, 32, 0, stream)(a, b, c, d);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
