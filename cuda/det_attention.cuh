// Batch-invariant attention: Backend::Attention of the CUDA backend's
// deterministic mode (cuda_backend.h), for every row of a step, prefill and
// decode alike, through one kernel.
//
// A query row (token t, query head h) at position p attends to keys 0 .. p of
// its sequence. Its arithmetic is fixed by the keys' positions alone:
//   * the keys are cut into partitions of `partition_keys` keys (kDetPartitionKeys,
//     512; a fixed split size, never a split count chosen per step) and each
//     partition into key tiles of kDetKeyTile (16) keys, at multiples of those
//     sizes from key 0;
//   * within a partition the row keeps an online softmax over the key tiles in
//     order, as cuda/prefill_attention.cuh does over its 64-key tiles: S = q·Kᵀ
//     on bf16 mma.m16n8k16 with fp32 accumulation over the head dim in order,
//     times the scale, keys past p masked to −∞; the running max, the sum of
//     e^(s − max) (each of the row's 4 lanes summing its own keys, added across
//     the lanes when the partition ends) and O += P·V (P rounded to bf16);
//   * the partitions' partials (max, sum, unnormalised O) are merged in
//     partition order (DetMerge*: each step scales the running total and the
//     next partial by e^(their max − the new max) with the roundings spelled
//     out), and the row's output is bf16(O · (1 / sum)).
// None of that depends on which rows share a launch, how many tokens the step
// has, how a prompt was chunked, whether the prefix came from the prefix cache
// or a recompute, or whether a CUDA graph replays the launch: a row gets the
// same bits in any batch (given the same K/V bits, which the same argument
// gives position by position). A masked key adds an exact zero to every sum,
// so the keys a tile reads past a row's position change nothing.
//
// Blocks: one warp per tile of up to 16 rows: n ≤ floor(16 / g) consecutive
// positions of one sequence × the g = Hq / Hkv query heads of one KV head (row
// r: position r / g, head r % g), so a K/V tile in shared memory serves the
// whole GQA group. Prefill rows come as BeginStep's 64-row tiles
// (prefill_tiles.h), each cut into 64 / n pieces; a decode row is a tile of
// one position. The partitions run
//   * in order in one block, each merged into the row's running total in
//     shared memory as it ends (prefill rows; decode rows without a workspace);
//   * or split (decode rows after Reserve): grid z = partition, a token whose
//     context is one partition writes its output, a longer one writes each
//     partition's partial to the workspace and a merge kernel, one block per
//     (token, query head), merges them in partition order.
// Both are the same arithmetic (the test DetAttentionTest compares them bit
// for bit). A split grid covers `max_partitions` for every token, fixed from
// the reserved capacity while a CUDA graph is captured; blocks past their
// token's context return at once, and each token's context is read on the
// device, so one captured grid serves every replay.
//
// Head dims 64 and 128 with g ≤ 16 (DetAttentionCovers); the backend runs the
// reference kernel (attention.cuh, also a function of the row alone: one
// block per token and KV head over its whole context) for every row of other
// shapes.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/attention.cuh"
#include "cuda/prefill_tiles.h"

namespace tpserve::cuda {

inline constexpr int kDetKeyTile = 16;          // keys per online-softmax step
inline constexpr int kDetPartitionKeys = kDecodePartitionSize;  // keys per partition: 512
inline constexpr int kDetTileRows = 16;         // query rows (positions × heads) per block

// True for the shapes the kernel is instantiated for: head_dim 64 or 128, Hq a
// multiple of Hkv with at most kDetTileRows query heads per KV head.
bool DetAttentionCovers(int head_dim, int num_heads, int num_kv_heads);

// Where a launch's rows come from and how its partitions run.
struct DetAttentionRows {
  // Prefill rows: BeginStep's tiles of kPrefillTileRows rows (device array),
  // or null for decode rows [first_decode, a.num_tokens) (one position each).
  const PrefillTile* tiles = nullptr;
  int64_t num_tiles = 0;
  int64_t first_decode = 0;
  int partition_keys = kDetPartitionKeys;  // a positive multiple of kDetKeyTile
  // Split (decode rows only): the grid's partitions, covering contexts up to
  // max_partitions · partition_keys, and the partials' workspace of
  // SplitDecodeWorkspaceFloats(decode rows, Hq, hd, max_partitions) floats or
  // more, laid out as attention_merge.h's CarveWorkspace (out rows here
  // unnormalised). max_partitions 0: in order, no workspace.
  int max_partitions = 0;
  float* workspace = nullptr;
  size_t workspace_floats = 0;
};

// Attention of the rows `rows` names (the other rows of the step are not
// touched): one launch in order, or the split partition kernel and the merge
// kernel. cudaErrorInvalidValue for a shape DetAttentionCovers refuses, a
// partition size that is not a positive multiple of kDetKeyTile, prefill
// tiles and a split together, a workspace that is too small, caches not
// 16-byte aligned (qkv and out: 4-byte) or a grid beyond CUDA's limits.
cudaError_t LaunchDetAttention(const PagedAttentionArgs& a, const DetAttentionRows& rows, cudaStream_t stream);

}  // namespace tpserve::cuda
