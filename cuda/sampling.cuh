// Sampling on rank 0 on the GPU: one thread block per row runs the row
// algorithm of sampling/sampling_row.h (the host sampler's semantics, without a
// sort) on the gathered LM-head logits. CudaSampler (cuda/cuda_sampler.h) owns
// the buffers and calls this launcher.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "sampling/sampling_row.h"

namespace tpserve::cuda {

// Threads per row (one block per row).
inline constexpr int kSampleThreads = 512;
// The penalty bitmask of a row lives in dynamic shared memory: ceil(V / 32)
// words. A block gets 48 KiB of static + dynamic shared memory without opting
// in, and the kernel's own static arrays (block reductions, a counter: under
// 300 bytes) take their share, so 1 KiB is kept for them: V <= 385,024 (Llama 3:
// 128,256; Qwen: 151,936). SampleRowsMaxDynamicShared() is the exact limit.
inline constexpr int64_t kSampleStaticSharedReserve = 1024;
inline constexpr int64_t kMaxSampleVocab = (48 * 1024 - kSampleStaticSharedReserve) * 8;

inline size_t SampleRowsSharedBytes(int64_t vocab) {
  return static_cast<size_t>((vocab + 31) / 32) * sizeof(uint32_t);
}

// All pointers are device memory.
struct SampleRowsArgs {
  const void* gathered = nullptr;  // [tp, S, Vs] bf16 (bf16 = true) or f32: token i = r·Vs + j of
                                   // row s is gathered[r, s, j]; i < vocab only
  bool bf16 = true;
  int32_t tp = 1;
  int32_t rows = 0;         // rows to sample (one block each)
  int32_t layout_rows = 0;  // S of the gathered tensor (>= every row index)
  const int32_t* row_index = nullptr;  // [rows] gathered row of each sampled row
  int32_t shard_vocab = 0;  // Vs
  int32_t vocab = 0;        // V <= tp·Vs, V <= kMaxSampleVocab
  // Below, indexed by sampled row k in [0, rows):
  const sampling::RowParams* params = nullptr;      // [rows]
  const int32_t* entry_offsets = nullptr;           // [rows + 1]: row k's entries are
                                                    //   entries[offsets[k], offsets[k + 1])
  const sampling::PenaltyEntry* entries = nullptr;  // [offsets[rows]], sorted by token per row
  int32_t top_stride = 0;                           // >= every row's num_logprobs (and >= 1)
  sampling::TopLogprob* top = nullptr;              // [rows, top_stride] out: row k's top n
  sampling::RowResult* results = nullptr;           // [rows] out
};

// The dynamic shared memory a launch may ask for (the device's per-kernel
// limit less the kernel's static use, the smaller over its two instantiations);
// under the emulator, 48 KiB less kSampleStaticSharedReserve.
// cudaFuncGetAttributes' error when it fails.
cudaError_t SampleRowsMaxDynamicShared(size_t* bytes);

// Samples every row; enqueues one kernel on `stream` (no allocation, no sync).
cudaError_t LaunchSampleRows(const SampleRowsArgs& args, cudaStream_t stream);

}  // namespace tpserve::cuda
