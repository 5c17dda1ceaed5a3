#include "cuda/gemv.cuh"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kUnroll = 4;  // 16-byte weight loads each lane has in flight

// The epilogue of one block: partial[(g · k_split + p) · kM + m] is warp p's
// part of column group g's sum for row m. One thread per (output, row) adds a
// column's warps in a fixed order and rounds once to bf16.
//   plain GEMV: output n = first + g, plus bias[n];
//   SiLU-mul: groups 2i (gate row f) and 2i + 1 (up row F + f) of feature
//   f = first + i, each rounded to bf16 as the GEMV would store it, then
//   out = silu(gate) · up as SiluMul computes it from those.
template <int kM, bool kSiluMul>
__device__ __forceinline__ void GemvEpilogue(const float* partial, int cols_per_block, int k_split, int64_t first,
                                             int64_t N, const __nv_bfloat16* __restrict__ bias,
                                             __nv_bfloat16* __restrict__ y) {
  const int outputs = kSiluMul ? cols_per_block / 2 : cols_per_block;
  if (static_cast<int>(threadIdx.x) >= outputs * kM) return;
  const int i = threadIdx.x / kM, m = threadIdx.x % kM;
  const int64_t out = first + i;
  if (out >= N) return;
  auto column_sum = [&](int g) {
    float sum = 0.f;
    for (int p = 0; p < k_split; ++p) sum += partial[(g * k_split + p) * kM + m];
    return sum;
  };
  if constexpr (kSiluMul) {
    const float g = __bfloat162float(__float2bfloat16(column_sum(2 * i)));
    const float u = __bfloat162float(__float2bfloat16(column_sum(2 * i + 1)));
    y[m * N + out] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
  } else {
    float sum = column_sum(i);
    if (bias != nullptr) sum += __bfloat162float(bias[out]);
    y[m * N + out] = __float2bfloat16(sum);
  }
}

// One block: plan.cols_per_block column groups (rows of w) for all kM rows of
// x; the kGemvWarps / cols_per_block warps of a group stride over its K
// together (cuda/gemv_plan.h). Every thread reaches the one __syncthreads.
//   plain GEMV (kSiluMul false): N outputs, group g of block b is row b·cols + g;
//   SiLU-mul: N = F features, group g of block b is the gate row (g even) or
//   the up row (g odd, F further) of feature b·cols/2 + g/2.
// A programmatic launch: before the wait it only asks L2 for each lane's first
// kUnroll weight vectors (no kernel writes w), so they are on their way while
// the previous kernel finishes; x, bias and y are touched after the wait.
template <int kM, bool kSiluMul>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
               const __nv_bfloat16* __restrict__ bias, int64_t N, int64_t K, int cols_per_block,
               __nv_bfloat16* __restrict__ y) {
  TPSERVE_SHARED_ARRAY(float, partial, kGemvWarps * kM);  // [warp, m] sums of each warp's part of K
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int k_split = kGemvWarps / cols_per_block;
  const int group = warp / k_split;
  const int64_t first = int64_t{blockIdx.x} * (kSiluMul ? cols_per_block / 2 : cols_per_block);
  const int64_t n = kSiluMul ? first + group / 2 : first + group;  // the output this warp serves
  const int64_t row = kSiluMul && group % 2 == 1 ? N + n : n;        // its row of w
  const int64_t chunks = K / kBf16PerVec;  // 16-byte vectors per row
  const int64_t stride = int64_t{kWarpSize} * k_split;
  const int64_t c_first = (warp % k_split) * kWarpSize + lane;
  const __nv_bfloat16* wr = w + row * K;  // read only when n < N
  if (n < N) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c_first + u * stride < chunks) PrefetchL2Bf16x8(wr, c_first + u * stride);
    }
  }
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  float acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.f;
  if (n < N) {
    for (int64_t c0 = c_first; c0 < chunks; c0 += stride * kUnroll) {
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
  GemvEpilogue<kM, kSiluMul>(partial, cols_per_block, k_split, first, N, bias, y);
}

template <int kM, bool kSiluMul>
void Launch(const GemvPlan& plan, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
            int64_t N, int64_t K, __nv_bfloat16* y, cudaStream_t stream, bool programmatic) {
  TPSERVE_LAUNCH_PDL(static_cast<unsigned>(plan.blocks), kGemvThreads, 0, stream, programmatic,
                     GemvKernel<kM, kSiluMul>)(x, w, bias, N, K, plan.cols_per_block, y);
}

// The kernel instantiated for M rows (1..8).
template <bool kSiluMul>
void LaunchRows(int64_t M, const GemvPlan& plan, const __nv_bfloat16* x, const __nv_bfloat16* w,
                const __nv_bfloat16* bias, int64_t N, int64_t K, __nv_bfloat16* y, cudaStream_t stream,
                bool programmatic) {
  switch (M) {
    case 1: Launch<1, kSiluMul>(plan, x, w, bias, N, K, y, stream, programmatic); break;
    case 2: Launch<2, kSiluMul>(plan, x, w, bias, N, K, y, stream, programmatic); break;
    case 3: Launch<3, kSiluMul>(plan, x, w, bias, N, K, y, stream, programmatic); break;
    case 4: Launch<4, kSiluMul>(plan, x, w, bias, N, K, y, stream, programmatic); break;
    case 5: Launch<5, kSiluMul>(plan, x, w, bias, N, K, y, stream, programmatic); break;
    case 6: Launch<6, kSiluMul>(plan, x, w, bias, N, K, y, stream, programmatic); break;
    case 7: Launch<7, kSiluMul>(plan, x, w, bias, N, K, y, stream, programmatic); break;
    default: Launch<8, kSiluMul>(plan, x, w, bias, N, K, y, stream, programmatic); break;
  }
}

// Whether `plan` is a split of kGemvWarps warps whose blocks cover N outputs
// of `per_output` column groups each (1: the GEMV, 2: a gate/up pair).
bool PlanCovers(const GemvPlan& plan, int64_t N, int per_output) {
  const int cols = plan.cols_per_block;
  return (cols == 1 || cols == 2 || cols == 4 || cols == 8) && cols % per_output == 0 &&
         plan.k_split * cols == kGemvWarps && plan.blocks * (cols / per_output) >= N && plan.blocks <= 0x7fffffff;
}

}  // namespace

bool GemvSupports(const void* x, const void* w, int64_t M, int64_t N, int64_t K) {
  return M >= 1 && M <= kGemvMaxRows && K > 0 && K % kBf16PerVec == 0 && N >= 0 && N <= 0x7fffffff &&
         K <= 0x7fffffff && Aligned16(x) && Aligned16(w);
}

cudaError_t LaunchGemv(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t M,
                       int64_t N, int64_t K, __nv_bfloat16* y, const GemvPlan& plan, cudaStream_t stream,
                       bool programmatic) {
  if (!GemvSupports(x, w, M, N, K) || !PlanCovers(plan, N, 1)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  LaunchRows<false>(M, plan, x, w, bias, N, K, y, stream, programmatic);
  return cudaGetLastError();
}

cudaError_t LaunchGemvSiluMul(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t M, int64_t F, int64_t K,
                              __nv_bfloat16* out, const GemvPlan& plan, cudaStream_t stream, bool programmatic) {
  if (F < 0 || !GemvSupports(x, w, M, 2 * F, K) || !PlanCovers(plan, F, 2)) return cudaErrorInvalidValue;
  if (F == 0) return cudaSuccess;
  LaunchRows<true>(M, plan, x, w, nullptr, F, K, out, stream, programmatic);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
