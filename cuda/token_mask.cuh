// Grammar masks on the device (constrained output, sampling/token_mask.h):
// every token of a masked row whose bit is clear becomes -inf in the gathered
// LM-head logits, in place, before the sampler reads them. The same bits as
// ApplyTokenMask on the host (-inf is exact in bf16 and f32), so the host and
// CUDA samplers see the same logits for the same mask (tests/cuda/token_mask_test).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// All pointers are device memory.
struct MaskRowsArgs {
  void* gathered = nullptr;  // [tp, S, Vs] bf16 (bf16 = true) or f32, in/out: token i of row s is
                             //   gathered[i / Vs, s, i % Vs]; i < vocab only (the padding is not touched)
  bool bf16 = true;
  int32_t layout_rows = 0;   // S
  int32_t shard_vocab = 0;   // Vs
  int32_t vocab = 0;         // V <= tp · Vs
  int32_t rows = 0;          // masked rows
  const int32_t* row_index = nullptr;  // [rows] gathered row of each masked row (< S)
  const uint32_t* words = nullptr;     // [rows, words_per_row]: bit i % 32 of word i / 32 set = token i allowed
  int32_t words_per_row = 0;           // >= ceil(V / 32)
};

// Masks every row; enqueues one kernel on `stream` (no allocation, no sync).
cudaError_t LaunchMaskRows(const MaskRowsArgs& args, cudaStream_t stream);

}  // namespace tpserve::cuda
