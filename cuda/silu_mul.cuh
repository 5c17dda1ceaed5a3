// SiLU-and-mul (Backend::SiluMul) and the Linear bias add.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// out[m, i] = silu(gate_up[m, i]) * gate_up[m, F + i].
//   gate_up: [M, 2F] bf16   out: [M, F] bf16
cudaError_t LaunchSiluMul(const __nv_bfloat16* gate_up, int64_t M, int64_t F, __nv_bfloat16* out,
                          cudaStream_t stream);

// y[m, n] += bias[n] (fp32 add, one rounding).
//   y: [M, N] bf16   bias: [N] bf16
cudaError_t LaunchAddBias(__nv_bfloat16* y, const __nv_bfloat16* bias, int64_t M, int64_t N,
                          cudaStream_t stream);

}  // namespace tpserve::cuda
