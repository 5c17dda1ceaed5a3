// Embedding gather with vocab-shard masking (Backend::Embedding).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// out[t] = table[ids[t] - vocab_start] when that row is in [0, Vs), else zeros.
//   ids:   [T] int32 (device)       table: [Vs, D] bf16       out: [T, D] bf16
cudaError_t LaunchEmbedding(const int32_t* ids, int64_t T, const __nv_bfloat16* table, int64_t Vs,
                            int64_t D, int64_t vocab_start, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace tpserve::cuda
