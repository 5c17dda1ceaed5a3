// The sliced sampler: the small-batch path of CudaSampler under the fast
// kernel set. Same semantics as the row kernel (sampling.cuh, the row
// algorithm of sampling/sampling_row.h: penalties, greedy, temperature, min-p,
// top-k, top-p, one inverse-CDF draw at the host-drawn uniform), for rows
// WITHOUT penalty entries and WITHOUT log-probs: a call with any such row runs
// the row kernel for all its rows (SlicedSamplerCovers).
//
// One block per (row, slice) (sample_slices.h plans the slices). No grid-wide
// sync: each stage is its own launch, writes per-(row, slice) partials or adds
// integer histograms into the workspace, and the next stage's blocks read them
// back, every block of a row computing the same row state in the same order
// (block (row, 0) also stores it for the stage after). Stages:
//   stats       per-slice best (value, lowest id); zeroes the row's histograms
//               of the selects the call runs
//   top-k 0..2  radix select of the top_k-th key, 11 + 11 + 10 key bits
//               (sample_slices.h), over 2048-bin count histograms (instead
//               of ~32 bisection passes)
//   top-p 0..2  the same over fixed-point mass histograms of the tokens min-p
//               and top-k keep (pass 0's total is the kept mass)
//   mass        per-slice kept mass (fixed point), for rows without top-p (a
//               top-p row's last pass leaves per-slice masses above its cut)
// There is no draw launch: the LAST stage of the call's list (whichever it
// is: stats for an all-greedy call, mass, the last top-p or top-k pass) ends
// with a per-row arrival. Every block of a live row, including those whose
// row the stage skips, writes its partials, fences (__threadfence) and adds
// 1 to the row's arrival counter in the workspace; the block that sees
// slices - 1 is the row's last, fences again, reads the other blocks'
// partials from L2 (__ldcg), folds them into the row state the stage leaves
// and draws: a greedy row's best id (all an all-greedy call's last block
// computes: a sampled row always plans top-p or mass), or the owner slice (whose exclusive
// prefix of kept masses, found by a block scan over all slices, holds
// u · total) walks its ids (threads over contiguous ids, a block scan). It
// then sets the counter back to 0 for the next call (or graph replay).
// An eager call runs stats, the top-k passes when any row has an active
// top-k, the top-p passes when any row has top_p < 1, and mass when a sampled
// row has no top-p (PlanSliceStages): greedy is 1 launch, temperature only 2,
// temperature + top-p 4, top-k + top-p 7. Every stage decides per row on the
// device (the row state's flags): a row a stage does not concern (a greedy row
// in a radix pass, a row without top-k in top-k's, a top-p row in mass) skips
// the work after reading the row state (and in the last stage still arrives).
// So any superset of a call's planned stages, in the same order, samples the
// same tokens; CudaSampler's decode-batch graphs capture one stage list per
// stage set (SliceStagesOf) and replay the one a step's rows plan.
// Padding rows: with live_rows set, the blocks of rows >= *live_rows (a
// device value, so a graph captured for a bucket of `rows` rows serves any
// smaller step) return at once, reading and writing nothing (their arrival
// counters included).
// Ties at a cut key go to the lowest ids, as RowSampler's Cut{key, id}: a
// select keeps the first m tokens (id order) of the cut key's tie group;
// slices are contiguous id ranges, so slice s keeps
// TieQuota(m, ties in slices < s, ties in s) of them, found by a block scan
// over its ids when it keeps some but not all.
// Precision: masses are sums of fixed-point fp32 weights (sample_slices.h),
// bit-identical run to run and within V · 2^-44 of the host sampler's fp64;
// tokens differ from the host sampler's only where u · total or top_p · total
// lies that close to a boundary of the cumulative distribution.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/sample_slices.h"
#include "sampling/sampling_row.h"

namespace tpserve::cuda {

enum class SliceStage : int8_t {
  kStats,
  kTopK0, kTopK1, kTopK2,
  kTopP0, kTopP1, kTopP2,
  kMass,
};
inline constexpr int kMaxSliceStages = 8;  // every stage: stats, 3 + 3 radix passes, mass

struct SliceStages {
  int32_t count = 0;
  SliceStage kinds[kMaxSliceStages] = {};
};

// Whether a row is sampled by the sliced path: no penalty entries, no log-probs.
inline bool SlicedSamplerCovers(const sampling::RowParams& p, int32_t num_entries) {
  return num_entries == 0 && p.num_logprobs < 0 && p.allowed_only == 0;
}

// The optional stages of a call, as a set of bits: the top-k passes, the
// top-p passes, mass (stats always runs). kSliceStageSets sets.
inline constexpr int32_t kStageSetTopK = 1, kStageSetTopP = 2, kStageSetMass = 4;
inline constexpr int32_t kSliceStageSets = 8;
// The set a call over rows[0, count) (host memory) needs: top-k's when a
// sampled row has an active top-k, top-p's when one has top_p < 1, mass when
// one has no top-p (greedy rows need none).
int32_t PlanSliceStageSet(const sampling::RowParams* rows, int64_t count, int32_t vocab);
// The stages of a set, in order: stats, top-k 0..2, top-p 0..2, mass (the
// last one of the list draws).
SliceStages SliceStagesOf(int32_t set);
// SliceStagesOf(PlanSliceStageSet(...)): the stages the call runs.
SliceStages PlanSliceStages(const sampling::RowParams* rows, int64_t count, int32_t vocab);

// Workspace bytes for a call of up to `rows` rows of up to `slices` slices.
size_t SlicedSampleWorkspaceBytes(int64_t rows, int32_t slices);
// The workspace's first bytes, the same for every `slices`: the per-row
// arrival counters ([rows] uint32) of the last stage. They must be zero
// when a workspace's first call starts (cudaMemset once, at allocation);
// every call leaves the counters of its live rows zero again, and does not
// touch the others, so a workspace sized for `rows` rows serves any call of
// up to `rows` rows, eagerly or as graph replays, without re-zeroing.
size_t SlicedSampleCounterBytes(int64_t rows);

// All pointers are device memory.
struct SlicedSampleArgs {
  const void* gathered = nullptr;  // [tp, S, Vs] bf16 (bf16 = true) or f32, as SampleRowsArgs
  bool bf16 = true;
  int32_t rows = 0;                     // rows to sample (the grid's rows)
  const int32_t* live_rows = nullptr;   // device [1] or nullptr: rows >= *live_rows (<= rows) are
                                        //   padding and return at once; nullptr: all `rows` are live
  int32_t layout_rows = 0;              // S of the gathered tensor (>= every row index)
  const int32_t* row_index = nullptr;   // [rows] gathered row of each sampled row
  int32_t shard_vocab = 0;              // Vs
  int32_t vocab = 0;                    // V <= tp·Vs, V <= kMaxSlicedVocab
  const sampling::RowParams* params = nullptr;  // [rows], each SlicedSamplerCovers (no entries)
  SlicePlan plan;                       // PlanSlices(...) or any plan that covers V
  SliceStages stages;                   // PlanSliceStages over the same rows, or a superset (SliceStagesOf)
  void* workspace = nullptr;            // SlicedSampleWorkspaceBytes(rows, plan.slices): its first
                                        //   SlicedSampleCounterBytes(rows) zero (left zero by the
                                        //   previous call on it), the rest any content
  size_t workspace_bytes = 0;
  sampling::RowResult* results = nullptr;  // [rows] out (logprob 0, num_top 0)
};

// Samples every live row; enqueues stages.count kernels on `stream` (no allocation,
// no sync; plain launches a CUDA graph can capture). Calls sharing a workspace
// must not overlap (one stream): the arrival counters are per row, not per call.
cudaError_t LaunchSlicedSample(const SlicedSampleArgs& args, cudaStream_t stream);

}  // namespace tpserve::cuda
