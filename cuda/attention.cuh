// Paged causal attention over block tables (Backend::Attention), GQA-aware.
//
// Paged cache layout (design.md, backend/step.h):
//   K, V: [num_blocks, block_size, Hkv, hd] bf16
// Position j of sequence s lives at slot block_tables[s][j / block_size] ·
// block_size + j % block_size. Each new token t (of sequence token_seq[t], at
// position positions[t]) attends to positions 0 .. positions[t] of its
// sequence, i.e. to its cached prefix, the earlier new tokens and itself; the
// step's K/V must already be stored (kv_store.cuh).
//
// One kernel serves prefill and decode tokens alike: one thread block per
// (token, KV head, chunk of up to 8 query heads of that KV head's group), so a
// K/V row is read once for all the query heads it serves. The block's warps
// split the context (warp w takes positions w, w + 4, ...), each keeps an
// online softmax (running max, sum and fp32 accumulator per query head), and
// the warps' partial results are merged at the end.
//
// Not yet here (issue 5): splitting a long context over several blocks with a
// reduction pass, and a query-tiled prefill kernel that reads each K/V tile
// once for many tokens. They earn their place through the benchmark.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve::cuda {

constexpr int kMaxAttentionHeadDim = 256;

struct PagedAttentionArgs {
  const __nv_bfloat16* qkv = nullptr;   // [T, (Hq + 2 Hkv) · hd] (q part read)
  int64_t num_tokens = 0;               // T
  const int32_t* token_seq = nullptr;   // [T] sequence of each token (device)
  const int32_t* positions = nullptr;   // [T] position of each token (device)
  const int32_t* block_tables = nullptr;  // [S, max_blocks_per_seq] (device)
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 0;
  int num_heads = 0;                    // Hq
  int num_kv_heads = 0;                 // Hkv (Hq % Hkv == 0)
  int head_dim = 0;                     // hd <= kMaxAttentionHeadDim
  float scale = 1.f;                    // logits = q · k · scale
  const __nv_bfloat16* k_cache = nullptr;  // [num_blocks, block_size, Hkv, hd]
  const __nv_bfloat16* v_cache = nullptr;  // [num_blocks, block_size, Hkv, hd]
  __nv_bfloat16* out = nullptr;         // [T, Hq · hd]
};

// cudaErrorInvalidValue for hd > kMaxAttentionHeadDim or Hq % Hkv != 0.
cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace tpserve::cuda
