// Row gather: the rows that reach the LM head (Backend::GatherRows).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// out[s] = x[rows[s]].
//   x: [T, D] bf16   rows: [S] int32 (device)   out: [S, D] bf16
// `programmatic`: a programmatic dependent launch (cuda/simt.cuh; sm_90+): at
// batch 1 it follows the last layer's down-projection GEMV, itself one.
cudaError_t LaunchGatherRows(const __nv_bfloat16* x, int64_t D, const int32_t* rows, int64_t S,
                             __nv_bfloat16* out, cudaStream_t stream, bool programmatic = false);

}  // namespace tpserve::cuda
