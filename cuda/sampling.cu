#include "cuda/sampling.cuh"

#include <algorithm>
#include "cuda/sample_block.cuh"
#include "cuda/simt.cuh"

#include <cstdint>

namespace tpserve::cuda {
namespace {

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
