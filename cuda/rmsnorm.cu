#include "cuda/norm_rope_rows.cuh"
#include "cuda/reduce.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

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

// The second pass of both vector kernels: out = row · rsqrt(sum_sq / D + eps) · w,
// from the thread's pieces of the row held in registers (piece i is vector
// threadIdx.x + i · blockDim.x of the row).
__device__ __forceinline__ void NormalizeRow(const uint4 (&row)[kRmsNormMaxVecsPerThread], float sum_sq, float eps,
                                             const __nv_bfloat16* __restrict__ w, int64_t D,
                                             __nv_bfloat16* __restrict__ out) {
  const int64_t vecs = D / kBf16PerVec;
  const float inv = RmsNormScale(sum_sq, D, eps);
#pragma unroll
  for (int i = 0; i < kRmsNormMaxVecsPerThread; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * blockDim.x;
    if (c >= vecs) break;
    float f[kBf16PerVec], wf[kBf16PerVec];
    UnpackBf16x8(row[i], f);
    UnpackBf16x8(LoadBf16x8(w, c), wf);
#pragma unroll
    for (int j = 0; j < kBf16PerVec; ++j) f[j] = f[j] * inv * wf[j];
    StoreBf16x8(out, c, PackBf16x8(f));
  }
}

// One block per row; thread t holds vectors t, t + blockDim.x, ... of the row
// in registers from the load to the store (in place, out == x, is safe). Both
// vector kernels may be programmatic launches: they wait before touching x.
__global__ void RmsNormVecKernel(const __nv_bfloat16* x, const __nv_bfloat16* __restrict__ w, float eps,
                                 int64_t D, __nv_bfloat16* out) {
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  const int64_t vecs = D / kBf16PerVec;
  const __nv_bfloat16* xr = x + blockIdx.x * D;
  uint4 xv[kRmsNormMaxVecsPerThread];
  float sq = 0.f;  // in the order VecRowsSumSquares reproduces (cuda/norm_rope_rows.cuh)
#pragma unroll
  for (int i = 0; i < kRmsNormMaxVecsPerThread; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * blockDim.x;
    if (c >= vecs) break;
    xv[i] = LoadBf16x8(xr, c);
    AddSquares(xv[i], sq);
  }
  NormalizeRow(xv, BlockSum(sq), eps, w, D, out + blockIdx.x * D);
}

__global__ void AddRmsNormVecKernel(__nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ residual,
                                    const __nv_bfloat16* __restrict__ w, float eps, int64_t D) {
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  const int64_t vecs = D / kBf16PerVec;
  __nv_bfloat16* xr = x + blockIdx.x * D;
  __nv_bfloat16* rr = residual + blockIdx.x * D;
  uint4 sum[kRmsNormMaxVecsPerThread];  // residual + x, rounded to bf16 as stored
  float sq = 0.f;  // in the order VecRowsSumSquares reproduces (cuda/norm_rope_rows.cuh)
#pragma unroll
  for (int i = 0; i < kRmsNormMaxVecsPerThread; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * blockDim.x;
    if (c >= vecs) break;
    float r[kBf16PerVec], a[kBf16PerVec];
    UnpackBf16x8(LoadBf16x8(rr, c), r);
    UnpackBf16x8(LoadBf16x8(xr, c), a);
#pragma unroll
    for (int j = 0; j < kBf16PerVec; ++j) r[j] += a[j];
    sum[i] = PackBf16x8(r);
    StoreBf16x8(rr, c, sum[i]);
    AddSquares(sum[i], sq);  // the statistics see what is stored
  }
  NormalizeRow(sum, BlockSum(sq), eps, w, D, xr);
}

}  // namespace

bool RmsNormVecSupports(int64_t D, const void* a, const void* b, const void* c, const void* d) {
  return D > 0 && D % kBf16PerVec == 0 && D <= kRmsNormVecMaxDim && Aligned16(a) && Aligned16(b) &&
         Aligned16(c) && (d == nullptr || Aligned16(d));
}

cudaError_t LaunchRmsNormVec(const __nv_bfloat16* x, const __nv_bfloat16* w, float eps, int64_t M, int64_t D,
                             __nv_bfloat16* out, cudaStream_t stream, bool programmatic) {
  if (M == 0) return cudaSuccess;
  if (M > 0x7fffffff || !RmsNormVecSupports(D, x, w, out)) return cudaErrorInvalidValue;
  TPSERVE_LAUNCH_PDL(static_cast<unsigned>(M), RmsNormVecThreads(D), 0, stream, programmatic, RmsNormVecKernel)(
      x, w, eps, D, out);
  return cudaGetLastError();
}

cudaError_t LaunchAddRmsNormVec(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* w, float eps,
                                int64_t M, int64_t D, cudaStream_t stream, bool programmatic) {
  if (M == 0) return cudaSuccess;
  if (M > 0x7fffffff || !RmsNormVecSupports(D, x, residual, w)) return cudaErrorInvalidValue;
  TPSERVE_LAUNCH_PDL(static_cast<unsigned>(M), RmsNormVecThreads(D), 0, stream, programmatic, AddRmsNormVecKernel)(
      x, residual, w, eps, D);
  return cudaGetLastError();
}

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
