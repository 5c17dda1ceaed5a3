// Qwen3 per-head q/k RMSNorm fused with rotate-half RoPE (Backend::QkNormRope).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

constexpr int kMaxRopeHeadDim = 512;  // hd limit of the kernel (shared memory row)

// In place on the first Hq + Hkv heads (q, then k) of every qkv row:
//   x = x / sqrt(mean(x²) + eps) * norm   (q_norm for q heads, k_norm for k heads; skipped when null)
//   (x[i], x[i + hd/2]) = (a·cos − b·sin, b·cos + a·sin), cos/sin from rope row positions[t].
//   qkv: [T, (Hq + 2 Hkv) · hd] bf16   positions: [T] int32 (device)
//   q_norm, k_norm: [hd] bf16 or null   rope: [max_position, hd] f32 = [cos | sin]
// hd must be even and at most kMaxRopeHeadDim.
cudaError_t LaunchQkNormRope(__nv_bfloat16* qkv, int64_t T, const int32_t* positions,
                             int num_heads, int num_kv_heads, int head_dim,
                             const __nv_bfloat16* q_norm, const __nv_bfloat16* k_norm, float eps,
                             const float* rope, cudaStream_t stream);

}  // namespace tpserve::cuda
