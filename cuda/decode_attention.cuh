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
// bf16 output; otherwise each busy block writes its partial to the workspace.
//
// Kernel 2, grid (decode token, query head): merges the token's partials
// (CombinePartials) and writes the output; a token whose context used one
// block is skipped at once. Not launched when the plan has one split.
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

// True when the fast kernel is instantiated for this head_dim and group
// (Hq / Hkv) and the arrays it loads 16 bytes at a time are 16-byte aligned.
bool FastDecodeCovers(const PagedAttentionArgs& args);

// Resident blocks per SM of the kernel instantiated for (head_dim, group),
// from the CUDA occupancy calculator (asked once per instantiation); 0 when
// there is no such instantiation. DecodePlanInput::blocks_per_sm.
int FastDecodeBlocksPerSm(int head_dim, int group);

// Floats of workspace a launch of `num_decode_tokens` tokens with `plan`
// needs (0 when plan.splits == 1: no partials). Layout as the split path's
// (attention.cuh, SplitDecodeArgs) with max_partitions = plan.splits.
size_t FastDecodeWorkspaceFloats(int64_t num_decode_tokens, int num_heads, int head_dim, const DecodePlan& plan);

// Attention of rows [first_token, args.num_tokens) of the step (decode rows:
// positions[t] + 1 keys each, any length); rows before first_token are not
// touched. `workspace` holds FastDecodeWorkspaceFloats(...) floats or more
// (may be null when plan.splits == 1). cudaErrorNotSupported for a shape
// FastDecodeCovers rejects; cudaErrorInvalidValue for a bad plan (splits
// outside [1, 65535], partition_size < 1), a small workspace, or the
// conditions of LaunchPagedAttention. `programmatic`: both kernels launch with
// PDL (cuda/simt.cuh; sm_90+ only).
cudaError_t LaunchFastDecodeAttention(const PagedAttentionArgs& args, int64_t first_token, const DecodePlan& plan,
                                      float* workspace, size_t workspace_floats, cudaStream_t stream,
                                      bool programmatic = false);

}  // namespace tpserve::cuda
