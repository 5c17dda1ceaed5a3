#include "cuda/token_mask.cuh"

#include <cmath>

#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kMaskThreads = 256;
constexpr int kMaskBlocksPerRow = 16;  // blocks per row: a 150k vocabulary is ~37 tokens per thread

template <typename T>
__device__ __forceinline__ T NegativeInfinity();
template <>
__device__ __forceinline__ uint16_t NegativeInfinity<uint16_t>() { return 0xFF80; }  // bf16 -inf
template <>
__device__ __forceinline__ float NegativeInfinity<float>() { return -INFINITY; }

// Block (row k, part y): the tokens y·blockDim + t, stepping by all the row's threads.
template <typename T>
__global__ void __launch_bounds__(kMaskThreads) MaskRowsKernel(MaskRowsArgs a) {
  const int32_t k = static_cast<int32_t>(blockIdx.x);
  const int64_t g = a.row_index[k];
  const uint32_t* words = a.words + int64_t{k} * a.words_per_row;
  T* logits = static_cast<T*>(a.gathered);
  const int64_t step = int64_t{gridDim.y} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.y} * blockDim.x + threadIdx.x; i < a.vocab; i += step) {
    if ((words[i >> 5] >> (i & 31)) & 1u) continue;
    const int64_t r = i / a.shard_vocab, j = i % a.shard_vocab;
    logits[(r * a.layout_rows + g) * a.shard_vocab + j] = NegativeInfinity<T>();
  }
}

}  // namespace

cudaError_t LaunchMaskRows(const MaskRowsArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return cudaSuccess;
  if (args.rows < 0 || args.gathered == nullptr || args.row_index == nullptr || args.words == nullptr ||
      args.shard_vocab < 1 || args.vocab < 1 || args.layout_rows < 1 ||
      int64_t{args.words_per_row} * 32 < args.vocab) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(args.rows), kMaskBlocksPerRow), block(kMaskThreads);
  if (args.bf16) {
    TPSERVE_LAUNCH(MaskRowsKernel<uint16_t>, grid, block, 0, stream)(args);
  } else {
    TPSERVE_LAUNCH(MaskRowsKernel<float>, grid, block, 0, stream)(args);
  }
  return cudaGetLastError();
}

}  // namespace tpserve::cuda
