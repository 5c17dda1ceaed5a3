#include "cuda/gemv.cuh"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kUnroll = 4;  // 16-byte weight loads each lane has in flight

// One block: plan.cols_per_block columns n of y for all kM rows; the
// kGemvWarps / cols_per_block warps of a column stride over its K together
// (cuda/gemv_plan.h). Every thread reaches the one __syncthreads.
template <int kM>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
               const __nv_bfloat16* __restrict__ bias, int64_t N, int64_t K, int cols_per_block,
               __nv_bfloat16* __restrict__ y) {
  TPSERVE_SHARED_ARRAY(float, partial, kGemvWarps * kM);  // [warp, m] sums of each warp's part of K
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int k_split = kGemvWarps / cols_per_block;
  const int64_t first_col = int64_t{blockIdx.x} * cols_per_block;
  const int64_t n = first_col + warp / k_split;
  const int64_t chunks = K / kBf16PerVec;  // 16-byte vectors per row
  const int64_t stride = int64_t{kWarpSize} * k_split;
  float acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.f;
  if (n < N) {
    const __nv_bfloat16* wr = w + n * K;
    for (int64_t c0 = (warp % k_split) * kWarpSize + lane; c0 < chunks; c0 += stride * kUnroll) {
      uint4 wv[kUnroll];  // the loads first, so kUnroll are in flight
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * stride;
        wv[u] = c < chunks ? LoadBf16x8(wr, c) : uint4{0, 0, 0, 0};
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * stride;
        if (c >= chunks) break;
        float wf[kBf16PerVec];
        UnpackBf16x8(wv[u], wf);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          float xf[kBf16PerVec];
          UnpackBf16x8(LoadBf16x8(x + m * K, c), xf);
#pragma unroll
          for (int j = 0; j < kBf16PerVec; ++j) acc[m] += wf[j] * xf[j];
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = WarpSum(acc[m]);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < kM; ++m) partial[warp * kM + m] = acc[m];
  }
  __syncthreads();
  // The epilogue: one thread per (column, row) adds the column's warps in a
  // fixed order, adds the bias and rounds once.
  if (static_cast<int>(threadIdx.x) < cols_per_block * kM) {
    const int col = threadIdx.x / kM, m = threadIdx.x % kM;
    const int64_t out = first_col + col;
    if (out < N) {
      float sum = 0.f;
      for (int p = 0; p < k_split; ++p) sum += partial[(col * k_split + p) * kM + m];
      if (bias != nullptr) sum += __bfloat162float(bias[out]);
      y[m * N + out] = __float2bfloat16(sum);
    }
  }
}

template <int kM>
void Launch(const GemvPlan& plan, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
            int64_t N, int64_t K, __nv_bfloat16* y, cudaStream_t stream) {
  TPSERVE_LAUNCH(GemvKernel<kM>, static_cast<unsigned>(plan.blocks), kGemvThreads, 0, stream)(
      x, w, bias, N, K, plan.cols_per_block, y);
}

}  // namespace

bool GemvSupports(const void* x, const void* w, int64_t M, int64_t N, int64_t K) {
  return M >= 1 && M <= kGemvMaxRows && K > 0 && K % kBf16PerVec == 0 && N >= 0 && N <= 0x7fffffff &&
         K <= 0x7fffffff && Aligned16(x) && Aligned16(w);
}

cudaError_t LaunchGemv(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t M,
                       int64_t N, int64_t K, __nv_bfloat16* y, const GemvPlan& plan, cudaStream_t stream) {
  const bool plan_ok = (plan.cols_per_block == 1 || plan.cols_per_block == 2 || plan.cols_per_block == 4 ||
                        plan.cols_per_block == 8) &&
                       plan.k_split * plan.cols_per_block == kGemvWarps &&
                       plan.blocks * plan.cols_per_block >= N && plan.blocks <= 0x7fffffff;
  if (!GemvSupports(x, w, M, N, K) || !plan_ok) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  switch (M) {
    case 1: Launch<1>(plan, x, w, bias, N, K, y, stream); break;
    case 2: Launch<2>(plan, x, w, bias, N, K, y, stream); break;
    case 3: Launch<3>(plan, x, w, bias, N, K, y, stream); break;
    case 4: Launch<4>(plan, x, w, bias, N, K, y, stream); break;
    case 5: Launch<5>(plan, x, w, bias, N, K, y, stream); break;
    case 6: Launch<6>(plan, x, w, bias, N, K, y, stream); break;
    case 7: Launch<7>(plan, x, w, bias, N, K, y, stream); break;
    default: Launch<8>(plan, x, w, bias, N, K, y, stream); break;
  }
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
