// Paged causal attention over block tables (Backend::Attention), GQA-aware.
//
// Paged cache layout (docs/architecture.md, "KV cache"; backend/step.h):
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
// These are the reference kernels (cuda/kernel_set.h). Under the reference
// set, decode tokens over long contexts take the split path below
// (flash-decoding) once the backend has a workspace (CudaBackend::Reserve),
// and every other row the single kernel above. Under the fast set, decode
// rows go through cuda/decode_attention.cuh (16-byte loads, partitions
// planned per step by cuda/decode_plan.h, one grid for every replay of a CUDA
// graph) and prefill rows through the query-tiled tensor-core kernel of
// cuda/prefill_attention.cuh (each K/V tile read once for 64 rows; head dims
// 64 and 128) when they cover the shape, and through these kernels otherwise.
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

// ---- Split decode attention (flash-decoding) ----
//
// With one query row per token, the kernel above runs one block per (token,
// KV head chunk): a batch of a few long decodes leaves most SMs idle while
// each block walks thousands of keys. The split path also cuts the context:
//
//   1. partition kernel, grid (decode token, KV head · chunk, partition p):
//      keys [p · partition_size, min((p + 1) · partition_size, context)) of
//      the token's sequence, the same GQA-aware online softmax as above (a K/V
//      row is read once for the chunk's query heads), merged over the warps;
//      writes the partition's softmax partial (attention_merge.h) per query
//      head: max, sum and the normalised output row.
//   2. combine kernel, grid (decode token, query head): merges the token's
//      partials with CombinePartials (attention_merge.h, tested on the CPU)
//      and writes the bf16 output row.
//
// The grid covers max_partitions for every token, a number the host fixes
// from the reserved capacity (StepCapacity::max_context), never from the
// step's seq_lens: a CUDA graph captured for a batch size replays for any
// contexts up to max_partitions · partition_size. Blocks whose partition lies
// past their token's context return at once, and the combine reads only the
// ceil(context / partition_size) partitions that were written.
constexpr int kDecodePartitionSize = 512;  // keys per partition

struct SplitDecodeArgs {
  int64_t first_token = 0;  // rows [first_token, num_tokens) of the step are decodes
  int partition_size = kDecodePartitionSize;
  int max_partitions = 0;   // contexts up to max_partitions · partition_size (grid depth)
  // Workspace of SplitDecodeWorkspaceFloats(...) floats or more, for
  // n = num_tokens − first_token decode tokens:
  //   partial_out [n, Hq, max_partitions, hd] | partial_max [n, Hq, max_partitions]
  //   | partial_sum [n, Hq, max_partitions]
  float* workspace = nullptr;
  size_t workspace_floats = 0;
};

// Floats of workspace the split path needs.
size_t SplitDecodeWorkspaceFloats(int64_t num_decode_tokens, int num_heads, int head_dim, int max_partitions);

// Attention of rows [split.first_token, args.num_tokens) (one query row per
// sequence: positions[t] + 1 keys each, at most max_partitions ·
// partition_size; longer contexts are cut short, so the caller checks). Rows
// before first_token are not touched. cudaErrorInvalidValue for the
// conditions of LaunchPagedAttention, a workspace that is too small, or a
// grid beyond CUDA's limits (max_partitions or the head chunks above 65535).
cudaError_t LaunchSplitDecodeAttention(const PagedAttentionArgs& args, const SplitDecodeArgs& split,
                                       cudaStream_t stream);

}  // namespace tpserve::cuda
