// The local half of the deterministic mode's all-reduce
// (cuda/rank_order_all_reduce.h): every rank's copy of a tensor, gathered,
// added in rank order.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// out[i] = (((g[0][i] + g[1][i]) + g[2][i]) + ...) in fp32, rounded once to
// out's type: the sum the gloo communicator computes (comm/gloo_communicator.cc,
// AllReduceFloats and its bf16 staging), so an element's bits depend on its
// ranks' values and nothing else.
//   gathered: [ranks, n]   out: [n] (may alias gathered's row of any rank)
// cudaErrorInvalidValue for ranks < 1, n < 0 or null pointers with n > 0.
cudaError_t LaunchSumRanksBf16(const __nv_bfloat16* gathered, int ranks, int64_t n, __nv_bfloat16* out,
                               cudaStream_t stream);
cudaError_t LaunchSumRanksF32(const float* gathered, int ranks, int64_t n, float* out, cudaStream_t stream);

}  // namespace tpserve::cuda
