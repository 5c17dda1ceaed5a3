// Partition planning of the fast paged decode attention (decode_attention.cuh):
// how many blocks share one (decode token, KV head) and which keys each takes.
// Host and device code (C++17, no CUDA needed to include it), unit-tested on
// the CPU (tests/cuda/decode_plan_test.cc).
//
// The launch's grid is (decode token, KV head, split): `splits` blocks per
// (token, KV head). A token with context c (keys 0 .. c-1) is cut into
// DecodePartitions(c) partitions of `partition_size` keys (the last may be
// shorter); block z of a (token, KV head) owns partitions z, z + splits,
// z + 2·splits, ... and folds all of them into one softmax partial
// (attention_merge.h). So a grid fixed at a CUDA graph's capture serves any
// replay context: a longer one gives each block more partitions, a shorter one
// leaves the blocks z >= DecodeUsedSplits(c) idle. When that is 1 the one
// busy block writes the bf16 output itself and no combine is needed; the
// kernel decides that from the token's context on the device.
//
// The host picks the plan per step (PlanDecode): as many splits as keep the
// grid within kDecodeMaxWaves waves of blocks_per_sm blocks on every SM,
// which is 2-4 waves whenever tokens x KV heads alone fill at most 2 (more
// than 4: one split), but no block with fewer than about kDecodeMinPartition
// keys of the planned context. A grid fixed for a CUDA graph cannot know the
// replay's context: when tokens x KV heads are few enough that the grid
// splits them (splits > 1: batch-1 decode is 8 KV heads on 132 SMs), its
// partitions are as small as a block folds in one iteration (block_keys), so
// that a replay at context 512 spreads over 16 blocks per KV head, each one
// iteration deep, not over 2 blocks of 256 keys 8 iterations deep; with one
// split the block takes every key anyway, in kDecodeMinPartition pieces. The
// partial results stay at most `splits` per (token, KV head) either way: a
// block folds all the partitions it owns into one.
//
// Several busy blocks of a (token, KV head) merge their partials in the
// kernel itself: the last block to finish (an arrival counter per (token, KV
// head), cuda/decode_attention.cu) reads the others' partials and writes the
// output, so no combine kernel runs.
#pragma once

#include <cstdint>

#include "cuda/host_device.h"

namespace tpserve::cuda {

inline constexpr int kDecodeMinPartition = 256;  // keys a block is worth, at the fewest
inline constexpr int kDecodeKeyGranule = 32;     // partition sizes are multiples of this
inline constexpr int kDecodeMaxWaves = 4;        // the grid's waves, at most (when split)
// Resident blocks of the decode kernel per SM (a wave is sm_count of these):
// the launcher asks the CUDA occupancy calculator for its instantiation
// (FastDecodeBlocksPerSm); planning clamps it to [1, kDecodeMaxBlocksPerSm],
// the most the reserved workspace is sized for.
inline constexpr int kDecodeMaxBlocksPerSm = 8;
inline constexpr int kDecodeMaxSplits = 1024;    // at most this many blocks per (token, KV head)

struct DecodePlanInput {
  int64_t num_tokens = 0;  // decode tokens of the launch (>= 1)
  int num_kv_heads = 0;    // KV heads (>= 1)
  // The longest context (keys) the plan must serve well: the step's longest
  // for an eager launch; the reserved capacity for one a graph captures.
  int64_t context = 0;
  int sm_count = 0;        // streaming multiprocessors (132 on an H200); <= 0 counts as 1
  // True when the launch is captured into a CUDA graph and replayed with other
  // contexts: the partitions are then the smallest (kDecodeMinPartition), so a
  // replay with a short context still spreads over the blocks.
  bool fixed_grid = false;
  int blocks_per_sm = 1;   // resident blocks of the kernel per SM, clamped to [1, kDecodeMaxBlocksPerSm]
  // Keys one block folds per loop iteration (FastDecodeBlockKeys): a fixed
  // grid's smallest partition, rounded up to kDecodeKeyGranule.
  int block_keys = kDecodeKeyGranule;
};

struct DecodePlan {
  int splits = 1;          // blocks per (token, KV head): the grid's z
  int partition_size = kDecodeMinPartition;  // keys per partition, a multiple of kDecodeKeyGranule
};

TPSERVE_HOST_DEVICE constexpr int64_t DecodeCeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of kDecodeMaxWaves waves on the GPU.
TPSERVE_HOST_DEVICE constexpr int64_t DecodeTargetBlocks(int sm_count, int blocks_per_sm) {
  const int per_sm = blocks_per_sm < 1 ? 1 : blocks_per_sm > kDecodeMaxBlocksPerSm ? kDecodeMaxBlocksPerSm
                                                                                      : blocks_per_sm;
  return int64_t{kDecodeMaxWaves} * per_sm * (sm_count > 0 ? sm_count : 1);
}

// The most splits any launch over contexts up to `context` gets.
TPSERVE_HOST_DEVICE constexpr int DecodeSplitCap(int64_t context) {
  const int64_t useful = DecodeCeilDiv(context > 0 ? context : 1, kDecodeMinPartition);
  return static_cast<int>(useful < kDecodeMaxSplits ? useful : kDecodeMaxSplits);
}

TPSERVE_HOST_DEVICE constexpr DecodePlan PlanDecode(const DecodePlanInput& in) {
  const int64_t units = (in.num_tokens > 0 ? in.num_tokens : 1) * (in.num_kv_heads > 0 ? in.num_kv_heads : 1);
  const int64_t fit = DecodeTargetBlocks(in.sm_count, in.blocks_per_sm) / units;  // splits within the target
  const int64_t want = fit > 1 ? fit : 1;
  const int cap = DecodeSplitCap(in.context);
  DecodePlan plan;
  plan.splits = static_cast<int>(want < cap ? want : cap);
  if (in.fixed_grid) {  // a replay's context is unknown (see the top)
    const int64_t keys = in.block_keys > kDecodeKeyGranule ? in.block_keys : kDecodeKeyGranule;
    plan.partition_size = plan.splits > 1 ? static_cast<int>(DecodeCeilDiv(keys, kDecodeKeyGranule) * kDecodeKeyGranule)
                                          : kDecodeMinPartition;
  } else {  // one partition per block at the planned context, in whole granules
    const int64_t keys = DecodeCeilDiv(in.context > 0 ? in.context : 1, plan.splits);
    plan.partition_size = static_cast<int>(DecodeCeilDiv(keys, kDecodeKeyGranule) * kDecodeKeyGranule);
  }
  return plan;
}

// Partitions of a context of `context` keys (>= 1).
TPSERVE_HOST_DEVICE constexpr int DecodePartitions(int context, const DecodePlan& plan) {
  return static_cast<int>(DecodeCeilDiv(context, plan.partition_size));
}

// Blocks that see keys (and write a partial) for a context of `context` keys.
// 1: that block writes the output and no merge of partials is needed.
TPSERVE_HOST_DEVICE constexpr int DecodeUsedSplits(int context, const DecodePlan& plan) {
  const int parts = DecodePartitions(context, plan);
  return parts < plan.splits ? parts : plan.splits;
}

// Softmax partials (per query head) a workspace must hold for any launch of
// up to `max_tokens` decode tokens over contexts up to `context` planned by
// PlanDecode: num_tokens · splits <= max(target, num_tokens) (splits is 1 or
// at most target / num_tokens) and <= num_tokens · DecodeSplitCap(context).
// Holds for every blocks_per_sm.
TPSERVE_HOST_DEVICE constexpr int64_t DecodeWorkspacePartials(int64_t max_tokens, int64_t context, int sm_count) {
  const int64_t target = DecodeTargetBlocks(sm_count, kDecodeMaxBlocksPerSm);
  const int64_t by_target = target > max_tokens ? target : max_tokens;
  const int64_t by_cap = max_tokens * DecodeSplitCap(context);
  return by_target < by_cap ? by_target : by_cap;
}

}  // namespace tpserve::cuda
