// Fast paged decode attention (KernelSet::kFast): the decode rows of a step,
// one query row per sequence, over the paged K/V cache of attention.cuh.
//
// Kernel 1, grid (decode token i, KV head, split z) of 128 threads, templated
// on head_dim (64, 128, 256) and the GQA group G = Hq / Hkv (1, 2, 4, 8): the
// block serves all G query heads of its KV head, so each K/V row is read once
// for them. A row is split over hd / 8 threads that each load 8 dims (16 bytes)
// of K and of V with one vector load; the block's 128 threads thus hold
// 1024 / hd rows at once, and each thread keeps kDecodeKeysInFlight rows of K
// and V in flight per iteration. q · k is summed over the row's threads with a
// shuffle reduction inside that subgroup (log2(hd / 8) steps, not a full warp);
// each subgroup keeps an fp32 online softmax per query head (one exponential
// per key and head plus one rescale per kDecodeKeysInFlight keys), and the
// subgroups' partials are merged in shared memory (attention_merge.h).
// The block owns the partitions z, z + splits, ... of its token's context
// (decode_plan.h) and reads the context (positions[t] + 1) from the device, so
// a grid fixed when a CUDA graph is captured serves every replay. When the
// token's context uses one block (DecodeUsedSplits == 1) that block writes the
// bf16 output; otherwise each busy block writes its partial to the workspace
// and arrives on its (token, KV head)'s counter, and the last to arrive merges
// the partials in split order and writes the output (the sliced sampler's
// "last block" pattern): one launch per layer, no combine kernel.
//
// Kernel 1 comes in two variants (DecodeVariant), chosen per (head_dim,
// group) in one place (FastDecodeVariant):
//   * kSimt, every instantiated shape: the kernel described above;
//   * kMma, groups 4 and 8 at head_dim 64 and 128: q · k and p · v on tensor
//     cores (mma.m16n8k16 bf16, cuda/mma.cuh), no shuffle per key. The
//     block's 4 warps take turns over 16-key chunks of its partitions. The G
//     query heads are rows 0 .. G-1 of the A operand (rows G .. 15 zero); a
//     lane loads 16 bytes (8 dims) of a K or V row straight into registers,
//     and the fragments are laid out so those are the B operands as loaded:
//     for q · k the k axis (dims) is permuted (lane t of key g holds dims
//     32m + 8t .. + 7 of slab m: the words of chunks 2m and 2m + 1), and
//     q's A fragment is loaded in the same order; for p · v each n-tile j of
//     a 64-dim slab holds the dims 8n + j (n = 0..7), so lane (g, t) loads
//     dims 8g .. 8g + 7 of keys 2t, 2t + 1, 2t + 8, 2t + 9 and pairs them per
//     dim with two register permutes. Scores and O stay in fp32 accumulators
//     with an online softmax per query head (row), P goes to the second mma
//     as bf16, and each warp's partial joins the block merge of the SIMT
//     kernel (attention_merge.h). Same grid, plan, workspace and direct
//     single-split path as kSimt. Each warp's K and V loads are software
//     pipelined across its chunks (and across the partitions its block owns):
//     the next chunk's K rows are requested as soon as the current scores
//     are computed, its V rows as soon as the current P · V is done, so one
//     chunk's loads are always in flight behind the math of another without
//     holding a second chunk's registers.
//
// Shapes outside the instantiations (LaunchFastDecodeAttention returns
// cudaErrorNotSupported; FastDecodeCovers says so beforehand) run the
// reference kernels of attention.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/attention.cuh"
#include "cuda/decode_plan.h"

namespace tpserve::cuda {

inline constexpr int kDecodeKeysInFlight = 4;  // K/V rows per thread per iteration

// The two implementations of kernel 1 (see above).
enum class DecodeVariant {
  kSimt,  // q · k over hd / 8 lanes with a shuffle reduction: every covered shape
  kMma,   // q · k and p · v on tensor cores: groups 4 and 8, head_dim 64 and 128
};
const char* DecodeVariantName(DecodeVariant variant);  // "simt", "mma"

// The variant LaunchFastDecodeAttention runs for (head_dim, group): the one
// place it is chosen (kMma where instantiated, kSimt otherwise).
DecodeVariant FastDecodeVariant(int head_dim, int group);
// True when `variant` is instantiated for (head_dim, group).
bool FastDecodeHasVariant(DecodeVariant variant, int head_dim, int group);

// True when the fast kernel is instantiated for this head_dim and group
// (Hq / Hkv) and the arrays it loads 16 bytes at a time are 16-byte aligned.
bool FastDecodeCovers(const PagedAttentionArgs& args);

// Resident blocks per SM of the kernel instantiated for (head_dim, group)
// (FastDecodeVariant's, or `variant`), from the CUDA occupancy calculator
// (asked once per instantiation); 0 when there is no such instantiation.
// DecodePlanInput::blocks_per_sm.
int FastDecodeBlocksPerSm(int head_dim, int group);
int FastDecodeBlocksPerSm(DecodeVariant variant, int head_dim, int group);

// Keys one block of the kernel for (head_dim, group) (FastDecodeVariant's, or
// `variant`) folds per iteration of its loop: DecodePlanInput::block_keys,
// the smallest partition worth planning. 0 where not instantiated.
int FastDecodeBlockKeys(int head_dim, int group);
int FastDecodeBlockKeys(DecodeVariant variant, int head_dim, int group);

// Floats of workspace a launch of `num_decode_tokens` tokens with `plan`
// needs (0 when plan.splits == 1: no partials). Layout as the split path's
// (attention.cuh, SplitDecodeArgs) with max_partitions = plan.splits.
size_t FastDecodeWorkspaceFloats(int64_t num_decode_tokens, int num_heads, int head_dim, const DecodePlan& plan);

// Attention of rows [first_token, args.num_tokens) of the step (decode rows:
// positions[t] + 1 keys each, any length); rows before first_token are not
// touched. `workspace` holds FastDecodeWorkspaceFloats(...) floats or more
// and `arrivals` one counter per (decode token, KV head), [n, Hkv], which
// must be zero before the first launch (cudaMemset) and which every launch
// leaves zero (both may be null when plan.splits == 1). One kernel launch.
// cudaErrorNotSupported for a shape FastDecodeCovers rejects;
// cudaErrorInvalidValue for a bad plan (splits outside [1, kDecodeMaxSplits],
// partition_size < 1), a small workspace, missing counters, or the
// conditions of LaunchPagedAttention. `programmatic`: launch with PDL
// (cuda/simt.cuh; sm_90+ only).
cudaError_t LaunchFastDecodeAttention(const PagedAttentionArgs& args, int64_t first_token, const DecodePlan& plan,
                                      float* workspace, size_t workspace_floats, uint32_t* arrivals,
                                      cudaStream_t stream, bool programmatic = false);
// The same with the variant forced (tests and benchmarks compare the two);
// cudaErrorNotSupported where `variant` is not instantiated for the shape.
cudaError_t LaunchFastDecodeAttention(DecodeVariant variant, const PagedAttentionArgs& args, int64_t first_token,
                                      const DecodePlan& plan, float* workspace, size_t workspace_floats,
                                      uint32_t* arrivals, cudaStream_t stream, bool programmatic = false);

}  // namespace tpserve::cuda
