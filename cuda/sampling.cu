#include "cuda/sampling.cuh"

#include <algorithm>
#include "cuda/simt.cuh"

#include <cstdint>

namespace tpserve::cuda {
namespace {

using sampling::ValueId;

__device__ __forceinline__ int64_t ShflXor(int64_t v, int mask) {
  return __shfl_xor_sync(0xffffffffu, static_cast<long long>(v), mask);
}
__device__ __forceinline__ double ShflXor(double v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ float ShflXor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ int32_t ShflXor(int32_t v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ ValueId ShflXor(ValueId v, int mask) {
  return ValueId{ShflXor(v.value, mask), ShflXor(v.id, mask)};
}

// The block of the row algorithm (see SerialBlock in sampling_row.h for the
// contract). Reductions are in a fixed order: lane 0 of each warp after a
// butterfly, then the warps in order, read by every thread alike, so every
// thread gets the same bits and the result does not change from run to run.
template <int kThreads>
struct CudaBlock {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
  static constexpr int kWarps = kThreads / 32;

  __device__ int32_t thread() const { return static_cast<int32_t>(threadIdx.x); }
  __device__ int32_t size() const { return kThreads; }
  __device__ void Sync() { __syncthreads(); }

  template <typename T, typename Op>
  __device__ T Reduce(T v, Op op) {
    TPSERVE_SHARED_ARRAY(T, partial, kWarps);
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, ShflXor(v, offset));
    __syncthreads();  // partial may still be read by the previous reduction
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    T r = partial[0];
    for (int w = 1; w < kWarps; ++w) r = op(r, partial[w]);
    return r;
  }

  __device__ int64_t Sum(int64_t v) { return Reduce(v, [](int64_t a, int64_t b) { return a + b; }); }
  __device__ double Sum(double v) { return Reduce(v, [](double a, double b) { return a + b; }); }
  __device__ float Min(float v) { return Reduce(v, [](float a, float b) { return fminf(a, b); }); }
  __device__ float Max(float v) { return Reduce(v, [](float a, float b) { return fmaxf(a, b); }); }
  __device__ int32_t MinId(int32_t v) {
    return Reduce(v, [](int32_t a, int32_t b) { return a < b ? a : b; });
  }
  __device__ int32_t MaxId(int32_t v) {
    return Reduce(v, [](int32_t a, int32_t b) { return a > b ? a : b; });
  }
  __device__ ValueId ArgMax(ValueId v) {
    return Reduce(v, [](ValueId a, ValueId b) { return sampling::Better(b, a) ? b : a; });
  }

  // Σ of v over the threads before this one (thread order); *total: over all.
  __device__ double ExclusiveSum(double v, double* total) {
    TPSERVE_SHARED_ARRAY(double, warp_sums, kWarps);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    double inclusive = v;
    for (int offset = 1; offset < 32; offset *= 2) {
      const double other = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    double exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 0) exclusive = 0;
    __syncthreads();
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    double before = 0, all = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w == warp) before = all;
      all += warp_sums[w];
    }
    *total = all;
    return before + exclusive;
  }

  __device__ void AtomicOr(uint32_t* word, uint32_t bits) { atomicOr(word, bits); }
  __device__ int32_t AtomicAdd(int32_t* counter, int32_t n) { return atomicAdd(counter, n); }
};

template <typename T>
__global__ void __launch_bounds__(kSampleThreads) SampleRowsKernel(SampleRowsArgs a) {
  TPSERVE_DYNAMIC_SHARED(uint32_t, seen);  // [ceil(V / 32)] the row's penalty bitmask
  TPSERVE_SHARED(int32_t, counter);       // slots of the top-n list
  using Block = CudaBlock<kSampleThreads>;
  Block block;
  const int32_t s = static_cast<int32_t>(blockIdx.x);  // sampled row
  const int32_t g = a.row_index[s];                     // its row of the gathered logits
  const sampling::GatheredRow<T> row{static_cast<const T*>(a.gathered) + int64_t{g} * a.shard_vocab,
                                     int64_t{a.layout_rows} * a.shard_vocab, a.shard_vocab, a.vocab};
  const int32_t first = a.entry_offsets[s];
  sampling::RowSampler<Block, T> sampler(block, row, a.entries + first,
                                         a.entry_offsets[s + 1] - first, a.params[s],
                                         sampling::RowScratch{seen, &counter});
  const sampling::RowResult result = sampler.Run(a.top + int64_t{s} * a.top_stride);
  if (threadIdx.x == 0) a.results[s] = result;
}

}  // namespace

cudaError_t SampleRowsMaxDynamicShared(size_t* bytes) {
#if defined(TPSERVE_CUDA_EMU)
  *bytes = static_cast<size_t>(48 * 1024 - kSampleStaticSharedReserve);
  return cudaSuccess;
#else
  cudaFuncAttributes bf16{}, f32{};
  if (cudaError_t e = cudaFuncGetAttributes(&bf16, SampleRowsKernel<uint16_t>); e != cudaSuccess) return e;
  if (cudaError_t e = cudaFuncGetAttributes(&f32, SampleRowsKernel<float>); e != cudaSuccess) return e;
  // Without the opt-in a block gets 48 KiB of static + dynamic shared memory.
  const auto limit = [](const cudaFuncAttributes& a) {
    return std::min<size_t>(static_cast<size_t>(a.maxDynamicSharedSizeBytes), 48 * 1024 - a.sharedSizeBytes);
  };
  *bytes = std::min(limit(bf16), limit(f32));
  return cudaSuccess;
#endif
}

cudaError_t LaunchSampleRows(const SampleRowsArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return cudaSuccess;
  if (args.rows < 0 || args.layout_rows < args.rows || args.row_index == nullptr || args.tp < 1 ||
      args.shard_vocab < 1 || args.vocab < 1 ||
      args.vocab > int64_t{args.tp} * args.shard_vocab || args.vocab > kMaxSampleVocab ||
      args.top_stride < 1) {
    return cudaErrorInvalidValue;
  }
  const size_t shared = SampleRowsSharedBytes(args.vocab);
  const dim3 grid(static_cast<unsigned>(args.rows)), block(kSampleThreads);
  if (args.bf16) {
    TPSERVE_LAUNCH(SampleRowsKernel<uint16_t>, grid, block, shared, stream)(args);
  } else {
    TPSERVE_LAUNCH(SampleRowsKernel<float>, grid, block, shared, stream)(args);
  }
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
