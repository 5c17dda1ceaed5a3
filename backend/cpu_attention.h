// The CPU backend's paged-attention kernels: K/V store by slot and causal
// attention through the block tables (fp32, plain loops; the oracle the CUDA
// kernels are checked against).
//
// Layouts (see step.h and backend.h):
//   qkv:      [T, (Hq + 2 Hkv) · hd]   per token [q: Hq·hd | k: Hkv·hd | v: Hkv·hd]
//   cache.k,
//   cache.v:  [num_blocks, block_size, Hkv, hd] f32; slot = block · block_size + offset
//   out:      [T, Hq · hd]
// A sequence's n new tokens sit at positions seq_len - n .. seq_len - 1; its
// earlier positions (a cached prefix, an earlier prefill chunk) must already be
// in the cache. Both functions trust metadata that Backend::BeginStep validated.
#pragma once

#include "backend/backend.h"
#include "backend/step.h"

namespace tpserve {

// Writes the k and v of every new token t to slot step.slot_mapping[t]
// (slot -1 = padding: skipped, the cache is not touched).
void CpuStoreKv(const StepMetadata& step, const float* qkv /*[T, qkv_width]*/,
                const AttentionShape& shape, KvCacheLayer cache);

// out[t, h·hd .. (h+1)·hd) = softmax(q_t,h · K[0..p_t]ᵀ · scale) · V[0..p_t] for
// every new token t at position p_t and query head h; K/V rows come from KV head
// h / (Hq / Hkv) of the token's sequence, read through its block table. Softmax
// in fp32 with the row maximum subtracted. CpuStoreKv must have run for the step.
//
// Batch-invariant: each query row (t, h) is computed in one order that names
// only its own q, the cached K/V of positions 0..p_t and the scale: the
// logits q·k_j (Dot's eight partial sums) for j = 0..p_t, their maximum,
// exp(logit − max) summed in j order, Σ_j e_j·v_j accumulated in j order, then
// one multiply by 1 / Σ e_j. Nothing depends on the other rows of its query
// tile or step, on how many of its keys this step computed (a prefill chunk
// of any size, a prefix from the cache, a recompute after preemption), or on
// which step stored them: the same position's K/V has the same bits whichever
// step stored it, since every op before the store is per row too.
void CpuAttention(const StepMetadata& step, const float* qkv /*[T, qkv_width]*/,
                  const AttentionShape& shape, KvCacheLayer cache, float scale,
                  float* out /*[T, Hq · hd]*/);

}  // namespace tpserve
