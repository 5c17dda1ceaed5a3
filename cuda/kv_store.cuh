// K/V store by slot mapping (Backend::StoreKv).
//
// Paged cache layout (docs/architecture.md, "KV cache"): K, V: [num_blocks, block_size, Hkv, hd]; a
// slot is block * block_size + offset, so slot s's row is at s · Hkv · hd.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

// For each token t with slot_mapping[t] >= 0 (−1 = padding, skipped):
//   k_cache[slot] = qkv[t, Hq·hd : (Hq+Hkv)·hd],  v_cache[slot] = qkv[t, (Hq+Hkv)·hd : ].
//   qkv: [T, (Hq + 2 Hkv) · hd] bf16   slot_mapping: [T] int64 (device)
//   k_cache, v_cache: [num_blocks · block_size, Hkv · hd] bf16
cudaError_t LaunchStoreKv(const __nv_bfloat16* qkv, int64_t T, const int64_t* slot_mapping,
                          int num_heads, int num_kv_heads, int head_dim, __nv_bfloat16* k_cache,
                          __nv_bfloat16* v_cache, cudaStream_t stream);

}  // namespace tpserve::cuda
