// How the small-batch GEMV (cuda/gemv.cuh) divides y[M, N] = x[M, K] · w[N, K]ᵀ
// among blocks and warps. Host and device code (C++17, no CUDA needed to
// include it), unit-tested on the CPU (tests/cuda/gemv_plan_test.cc).
//
// A block of kGemvWarps warps owns `cols_per_block` consecutive output columns
// (rows of w) for all M rows of x, so each weight byte is read once. The
// kGemvWarps / cols_per_block warps of a column split its K (split-K inside the
// block: their lanes stride over the row's 16-byte chunks together) and add
// their partial sums through shared memory; no workspace, no atomics, so the
// launch is a plain kernel a CUDA graph can capture.
//
// The plan takes the most columns per block that still gives every SM
// kGemvMinBlocksPerSm blocks (wide N: no split-K), and splits K when N alone
// cannot fill the GPU (a 1024-column projection on 132 SMs), as long as every
// lane of a column's warps still gets at least one 16-byte chunk of K.
#pragma once

#include <cstdint>

#include "cuda/host_device.h"

namespace tpserve::cuda {

inline constexpr int kGemvMaxRows = 8;          // M <= this takes the GEMV; more goes to cuBLAS
inline constexpr int kGemvWarps = 8;            // warps per block (256 threads)
inline constexpr int kGemvThreads = kGemvWarps * 32;
inline constexpr int kGemvElemsPerLoad = 8;     // bf16 per 16-byte load: K % 8 == 0 is required
inline constexpr int kGemvMinBlocksPerSm = 2;   // blocks per SM the plan aims for

struct GemvPlan {
  int cols_per_block = kGemvWarps;  // 1, 2, 4 or 8 output columns per block
  int k_split = 1;                  // warps per column = kGemvWarps / cols_per_block
  int64_t blocks = 0;               // ceil(N / cols_per_block)
};

// The plan for N output columns of K inputs on a GPU of `num_sms` SMs (at
// least 1 is assumed). M does not enter: every block serves all M rows.
TPSERVE_HOST_DEVICE inline GemvPlan PlanGemv(int64_t N, int64_t K, int num_sms) {
  const int64_t target_blocks = int64_t{num_sms < 1 ? 1 : num_sms} * kGemvMinBlocksPerSm;
  const int64_t chunks = K / kGemvElemsPerLoad;  // 16-byte chunks per row of w
  GemvPlan plan;
  plan.blocks = (N + plan.cols_per_block - 1) / plan.cols_per_block;
  for (int cols = kGemvWarps / 2; cols >= 1 && plan.blocks < target_blocks; cols /= 2) {
    const int k_split = kGemvWarps / cols;
    if (chunks < int64_t{k_split} * 32) break;  // a lane of the split would get no chunk
    plan.cols_per_block = cols;
    plan.k_split = k_split;
    plan.blocks = (N + cols - 1) / cols;
  }
  return plan;
}

// The plan of the GEMV with the SiLU-and-mul epilogue (LaunchGemvSiluMul):
// out[M, F] from the 2F rows [gate; up] of w. A block's column groups come in
// (gate row j, up row F + j) pairs, so it owns cols_per_block / 2 features and
// cols_per_block is at least 2: PlanGemv(2F, K) with its one-column split
// (k_split 8) widened to two columns (k_split 4); blocks = ceil(F / pairs).
// Under any other plan the sums of a row are added in the order PlanGemv's
// GEMV adds them.
TPSERVE_HOST_DEVICE inline GemvPlan PlanGemvSiluMul(int64_t F, int64_t K, int num_sms) {
  GemvPlan plan = PlanGemv(2 * F, K, num_sms);
  if (plan.cols_per_block < 2) {
    plan.cols_per_block = 2;
    plan.k_split = kGemvWarps / 2;
  }
  const int64_t pairs = plan.cols_per_block / 2;
  plan.blocks = (F + pairs - 1) / pairs;
  return plan;
}

}  // namespace tpserve::cuda
