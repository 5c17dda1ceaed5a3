#include "cuda/gemv.cuh"
#include "cuda/norm_rope_rows.cuh"
#include "cuda/reduce.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kUnroll = 4;  // 16-byte weight loads each lane has in flight

// What a GEMV block does with its columns' sums (gemv.cuh says what each
// launch is for). scripts/kernel-resources.sh names the instantiations by
// number: (Epilogue)0 .. 3 in this order.
enum class Epilogue {
  kStore,        // y = bf16(sum + bias)
  kSiluMul,      // (gate, up) column pairs: y = silu(bf16 gate) · bf16 up
  kAddResidual,  // y is the residual: y = bf16(y + bf16(sum + bias))
  kQkRope,       // kStore; v columns to the V cache too; q/k heads finished by their last block
};

// A launch's arguments; what its epilogue and prologue do not use is null.
struct GemvArgs {
  const __nv_bfloat16* x;     // [M, K]
  const __nv_bfloat16* w;     // [N, K] (kSiluMul: [2N, K] = [gate; up])
  const __nv_bfloat16* bias;  // [N] or null
  int64_t N, K;
  int cols_per_block;
  __nv_bfloat16* y;           // [M, N] out (kAddResidual: the residual, in/out)
  const __nv_bfloat16* norm;  // the RMSNorm prologue's weight [K] (kNorm)
  float eps;
  GemvQkRope qk;              // kQkRope
};

// The epilogue of one block: partial[(g · k_split + p) · kM + m] is warp p's
// part of column group g's sum for row m. One thread per (output, row) adds a
// column's warps in a fixed order and rounds once to bf16 (Epilogue says what
// it then does); threads without an output return.
//   plain GEMV: output n = first + g, plus bias[n];
//   SiLU-mul: groups 2i (gate row f) and 2i + 1 (up row F + f) of feature
//   f = first + i, each rounded to bf16 as the GEMV would store it, then
//   out = silu(gate) · up as SiluMul computes it from those.
template <int kM, Epilogue kEpi>
__device__ __forceinline__ void GemvEpilogue(const GemvArgs& a, const float* partial, int k_split, int64_t first) {
  constexpr bool kPairs = kEpi == Epilogue::kSiluMul;
  const int outputs = kPairs ? a.cols_per_block / 2 : a.cols_per_block;
  if (static_cast<int>(threadIdx.x) >= outputs * kM) return;
  const int i = threadIdx.x / kM, m = threadIdx.x % kM;
  const int64_t out = first + i;
  if (out >= a.N) return;
  auto column_sum = [&](int g) {
    float sum = 0.f;
    for (int p = 0; p < k_split; ++p) sum += partial[(g * k_split + p) * kM + m];
    return sum;
  };
  __nv_bfloat16* y = a.y + m * a.N + out;
  if constexpr (kPairs) {
    const float g = __bfloat162float(__float2bfloat16(column_sum(2 * i)));
    const float u = __bfloat162float(__float2bfloat16(column_sum(2 * i + 1)));
    *y = __float2bfloat16(g / (1.f + __expf(-g)) * u);
  } else {
    float sum = column_sum(i);
    if (a.bias != nullptr) sum += __bfloat162float(a.bias[out]);
    const __nv_bfloat16 value = __float2bfloat16(sum);
    if constexpr (kEpi == Epilogue::kAddResidual) {  // AddRmsNorm's add: residual + the stored GEMV output
      *y = __float2bfloat16(__bfloat162float(*y) + __bfloat162float(value));
    } else {
      *y = value;
    }
    if constexpr (kEpi == Epilogue::kQkRope) {  // a v column: to the cache as it is (the fused kernel's copy)
      const GemvQkRope& qk = a.qk;
      const int64_t v_first = int64_t{qk.num_heads + qk.num_kv_heads} * qk.head_dim;
      const int64_t slot = qk.slot_mapping[m];
      if (out >= v_first && slot >= 0) qk.v_cache[slot * int64_t{qk.num_kv_heads} * qk.head_dim + out - v_first] = value;
    }
  }
}

// kQkRope after every column of the block is stored: the block's columns lie
// in one head (head_dim is a multiple of cols_per_block); the last of a q or
// k head's blocks to arrive normalises and rotates each of the kM rows of the
// head in place and stores k (NormRopeHead, what LaunchQkNormRopeStoreKv's
// kernel runs). Call from every thread.
template <int kM>
__device__ void FinishQkHead(const GemvArgs& a, int64_t first) {
  const GemvQkRope& qk = a.qk;
  const int hd = qk.head_dim, head = static_cast<int>(first / hd);
  if (head >= qk.num_heads + qk.num_kv_heads) return;  // a v head, uniform over the block
  if (!LastBlockToArrive(qk.arrivals + head, static_cast<uint32_t>(hd / a.cols_per_block))) return;
  const bool is_k = head >= qk.num_heads;
  const int64_t kv_row = int64_t{qk.num_kv_heads} * hd;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const int64_t slot = qk.slot_mapping[m];
    __nv_bfloat16* cache_row = is_k && slot >= 0 ? qk.k_cache + slot * kv_row + int64_t{head - qk.num_heads} * hd
                                                 : nullptr;
    NormRopeHead(a.y + m * a.N + int64_t{head} * hd, is_k ? qk.k_norm : qk.q_norm, qk.eps, hd,
                 qk.rope + static_cast<int64_t>(qk.positions[m]) * hd, cache_row);
  }
}

// One block: plan.cols_per_block column groups (rows of w) for all kM rows of
// x; the kGemvWarps / cols_per_block warps of a group stride over its K
// together (cuda/gemv_plan.h). Every thread reaches every __syncthreads.
//   plain GEMV (kStore, kAddResidual, kQkRope): N outputs, group g of block b
//   is row b·cols + g;
//   SiLU-mul: N = F features, group g of block b is the gate row (g even) or
//   the up row (g odd, F further) of feature b·cols/2 + g/2.
// kNorm: x's rows are normalised first (the RMSNorm prologue): the block
// finds each row's Σ x² as the vector RmsNorm kernel does, then scales each
// x vector as that kernel stores it (bf16) before it enters the sums.
// A programmatic launch: before the wait it only asks L2 for each lane's first
// kUnroll weight vectors (no kernel writes w), so they are on their way while
// the previous kernel finishes; x, bias and y are touched after the wait.
// The arguments stay in the constant bank (__grid_constant__), and the bounds
// ask for the plan's kGemvMinBlocksPerSm blocks per SM (at most 128 registers):
// without them ptxas spilled a few bytes of some instantiations at 32-64
// registers (scripts/kernel-resources.sh).
template <int kM, Epilogue kEpi, bool kNorm>
__global__ void __launch_bounds__(kGemvThreads, kGemvMinBlocksPerSm) GemvKernel(const __grid_constant__ GemvArgs a) {
  TPSERVE_SHARED_ARRAY(float, partial, kGemvWarps * kM);  // [warp, m] sums of each warp's part of K
  constexpr bool kPairs = kEpi == Epilogue::kSiluMul;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int k_split = kGemvWarps / a.cols_per_block;
  const int group = warp / k_split;
  const int64_t first = int64_t{blockIdx.x} * (kPairs ? a.cols_per_block / 2 : a.cols_per_block);
  const int64_t n = kPairs ? first + group / 2 : first + group;  // the output this warp serves
  const int64_t row = kPairs && group % 2 == 1 ? a.N + n : n;      // its row of w
  const int64_t K = a.K, chunks = K / kBf16PerVec;                 // 16-byte vectors per row
  const int64_t stride = int64_t{kWarpSize} * k_split;
  const int64_t c_first = (warp % k_split) * kWarpSize + lane;
  const __nv_bfloat16* wr = a.w + row * K;  // read only when n < N
  if (n < a.N) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c_first + u * stride < chunks) PrefetchL2Bf16x8(wr, c_first + u * stride);
    }
  }
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  float scale[kM];  // kNorm: 1 / rms of each row
  if constexpr (kNorm) {
    float sum_squares[kM];
    VecRowsSumSquares<kM>(a.x, K, sum_squares);
#pragma unroll
    for (int m = 0; m < kM; ++m) scale[m] = RmsNormScale(sum_squares[m], K, a.eps);
  }
  float acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.f;
  if (n < a.N) {
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
        float wf[kBf16PerVec], nf[kBf16PerVec];
        UnpackBf16x8(wv[u], wf);
        if constexpr (kNorm) UnpackBf16x8(LoadBf16x8(a.norm, c), nf);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          float xf[kBf16PerVec];
          UnpackBf16x8(LoadBf16x8(a.x + m * K, c), xf);
          if constexpr (kNorm) {  // as the vector RmsNorm stores it (cuda/rmsnorm.cu, NormalizeRow)
#pragma unroll
            for (int j = 0; j < kBf16PerVec; ++j) xf[j] = __bfloat162float(__float2bfloat16(xf[j] * scale[m] * nf[j]));
          }
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
  GemvEpilogue<kM, kEpi>(a, partial, k_split, first);
  if constexpr (kEpi == Epilogue::kQkRope) FinishQkHead<kM>(a, first);
}

// The kernel instantiated for M rows (1..8).
template <Epilogue kEpi, bool kNorm>
void LaunchRows(int64_t M, const GemvPlan& plan, const GemvArgs& a, cudaStream_t stream, bool programmatic) {
  const unsigned blocks = static_cast<unsigned>(plan.blocks);
  switch (M) {
    case 1: TPSERVE_LAUNCH_PDL(blocks, kGemvThreads, 0, stream, programmatic, GemvKernel<1, kEpi, kNorm>)(a); break;
    case 2: TPSERVE_LAUNCH_PDL(blocks, kGemvThreads, 0, stream, programmatic, GemvKernel<2, kEpi, kNorm>)(a); break;
    case 3: TPSERVE_LAUNCH_PDL(blocks, kGemvThreads, 0, stream, programmatic, GemvKernel<3, kEpi, kNorm>)(a); break;
    case 4: TPSERVE_LAUNCH_PDL(blocks, kGemvThreads, 0, stream, programmatic, GemvKernel<4, kEpi, kNorm>)(a); break;
    case 5: TPSERVE_LAUNCH_PDL(blocks, kGemvThreads, 0, stream, programmatic, GemvKernel<5, kEpi, kNorm>)(a); break;
    case 6: TPSERVE_LAUNCH_PDL(blocks, kGemvThreads, 0, stream, programmatic, GemvKernel<6, kEpi, kNorm>)(a); break;
    case 7: TPSERVE_LAUNCH_PDL(blocks, kGemvThreads, 0, stream, programmatic, GemvKernel<7, kEpi, kNorm>)(a); break;
    default: TPSERVE_LAUNCH_PDL(blocks, kGemvThreads, 0, stream, programmatic, GemvKernel<8, kEpi, kNorm>)(a); break;
  }
}

// Whether `plan` is a split of kGemvWarps warps whose blocks cover N outputs
// of `per_output` column groups each (1: the GEMV, 2: a gate/up pair).
bool PlanCovers(const GemvPlan& plan, int64_t N, int per_output) {
  const int cols = plan.cols_per_block;
  return (cols == 1 || cols == 2 || cols == 4 || cols == 8) && cols % per_output == 0 &&
         plan.k_split * cols == kGemvWarps && plan.blocks * (cols / per_output) >= N && plan.blocks <= 0x7fffffff;
}

GemvArgs Args(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t N, int64_t K,
              __nv_bfloat16* y, const GemvPlan& plan) {
  GemvArgs a{};
  a.x = x, a.w = w, a.bias = bias, a.N = N, a.K = K, a.cols_per_block = plan.cols_per_block, a.y = y;
  return a;
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
  LaunchRows<Epilogue::kStore, false>(M, plan, Args(x, w, bias, N, K, y, plan), stream, programmatic);
  return cudaGetLastError();
}

cudaError_t LaunchGemvSiluMul(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t M, int64_t F, int64_t K,
                              __nv_bfloat16* out, const GemvPlan& plan, cudaStream_t stream, bool programmatic) {
  if (F < 0 || !GemvSupports(x, w, M, 2 * F, K) || !PlanCovers(plan, F, 2)) return cudaErrorInvalidValue;
  if (F == 0) return cudaSuccess;
  LaunchRows<Epilogue::kSiluMul, false>(M, plan, Args(x, w, nullptr, F, K, out, plan), stream, programmatic);
  return cudaGetLastError();
}

cudaError_t LaunchGemvAddResidual(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                                  int64_t M, int64_t N, int64_t K, __nv_bfloat16* residual, const GemvPlan& plan,
                                  cudaStream_t stream, bool programmatic) {
  if (!GemvSupports(x, w, M, N, K) || !PlanCovers(plan, N, 1)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  LaunchRows<Epilogue::kAddResidual, false>(M, plan, Args(x, w, bias, N, K, residual, plan), stream, programmatic);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormGemvSiluMul(const __nv_bfloat16* x, const __nv_bfloat16* norm, float eps,
                                     const __nv_bfloat16* w, int64_t M, int64_t F, int64_t K, __nv_bfloat16* out,
                                     const GemvPlan& plan, cudaStream_t stream, bool programmatic) {
  if (F < 0 || !GemvSupports(x, w, M, 2 * F, K) || !RmsNormVecSupports(K, x, norm, w) || !PlanCovers(plan, F, 2)) {
    return cudaErrorInvalidValue;
  }
  if (F == 0) return cudaSuccess;
  GemvArgs a = Args(x, w, nullptr, F, K, out, plan);
  a.norm = norm, a.eps = eps;
  LaunchRows<Epilogue::kSiluMul, true>(M, plan, a, stream, programmatic);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormGemvQkRope(const __nv_bfloat16* x, const __nv_bfloat16* norm, float eps,
                                    const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t M, int64_t N,
                                    int64_t K, __nv_bfloat16* qkv, const GemvQkRope& qk, const GemvPlan& plan,
                                    cudaStream_t stream, bool programmatic) {
  const int hd = qk.head_dim;
  if (!GemvSupports(x, w, M, N, K) || !RmsNormVecSupports(K, x, norm, w) || !PlanCovers(plan, N, 1) || hd <= 0 ||
      hd % 2 != 0 || hd / 2 > kGemvThreads || hd % plan.cols_per_block != 0 || qk.num_heads <= 0 ||
      qk.num_kv_heads <= 0 || N != int64_t{qk.num_heads + 2 * qk.num_kv_heads} * hd || qk.positions == nullptr ||
      qk.slot_mapping == nullptr || qk.rope == nullptr || qk.k_cache == nullptr || qk.v_cache == nullptr ||
      qk.arrivals == nullptr) {
    return cudaErrorInvalidValue;
  }
  GemvArgs a = Args(x, w, bias, N, K, qkv, plan);
  a.norm = norm, a.eps = eps, a.qk = qk;
  LaunchRows<Epilogue::kQkRope, true>(M, plan, a, stream, programmatic);
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
