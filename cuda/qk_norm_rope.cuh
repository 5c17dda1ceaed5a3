// Qwen3 per-head q/k RMSNorm fused with rotate-half RoPE (Backend::QkNormRope).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

constexpr int kMaxRopeHeadDim = 512;  // hd limit of the kernel (shared memory row)

// Launch geometry: one block per (token, head); tokens on grid.x (up to
// 2^31 - 1: a step's token budget can pass the 65,535 that grid.y and grid.z
// allow), the Hq + Hkv heads on grid.y. False when either is out of range.
struct QkNormRopeGrid {
  unsigned tokens = 0;  // grid.x
  unsigned heads = 0;   // grid.y
};
inline bool QkNormRopeGridFor(int64_t T, int num_heads, int num_kv_heads, QkNormRopeGrid* grid) {
  const int64_t heads = int64_t{num_heads} + num_kv_heads;
  if (T < 1 || T > 0x7fffffff || heads < 1 || heads > 65535) return false;
  grid->tokens = static_cast<unsigned>(T);
  grid->heads = static_cast<unsigned>(heads);
  return true;
}

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

// LaunchQkNormRope and LaunchStoreKv (cuda/kv_store.cuh) in one launch, the
// fast kernel set's Backend::QkNormRopeStoreKv: q and k heads are normalised
// and rotated in place as above, and each token with slot_mapping[t] >= 0
// (−1 = padding, skipped) also has its rotated k and its v written to
//   k_cache, v_cache: [num_blocks · block_size, Hkv · hd] bf16 (row = slot).
// One block per (token, head) over the Hq + 2 Hkv heads, one thread per
// rotate-half pair (i, i + hd/2), so a head is read once, kept in registers
// between the norm and the rotation, and written to qkv and the cache.
// Same limits as LaunchQkNormRope. `programmatic`: launch with PDL
// (cuda/simt.cuh; sm_90+ only).
cudaError_t LaunchQkNormRopeStoreKv(__nv_bfloat16* qkv, int64_t T, const int32_t* positions,
                                    const int64_t* slot_mapping, int num_heads, int num_kv_heads, int head_dim,
                                    const __nv_bfloat16* q_norm, const __nv_bfloat16* k_norm, float eps,
                                    const float* rope, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                                    cudaStream_t stream, bool programmatic = false);

}  // namespace tpserve::cuda
