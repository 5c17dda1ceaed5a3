// Merging softmax partials: the math that lets attention over one context be
// computed in pieces (the warps of a block, the partitions of a long context)
// and put together afterwards. Host and device code (C++17, no CUDA needed
// to include it), so the very functions the kernels call are tested on the CPU
// (tests/cuda/attention_merge_test.cc).
//
// A partial over a subset J of the keys 0..n-1 (scores s_j, value rows v_j):
//   max = max_{j∈J} s_j
//   sum = Σ_{j∈J} e^(s_j − max)
//   out = Σ_{j∈J} e^(s_j − max) · v_j / sum        (a normalised [hd] row)
// An empty J (or one whose scores are all −∞) has max = −∞, sum = 0 and an
// `out` that is never read (it may be garbage or NaN).
//
// Partials over disjoint J_1 .. J_P whose union is every key combine exactly:
//   M   = max_p max_p
//   w_p = sum_p · e^(max_p − M)          = Σ_{j∈J_p} e^(s_j − M)
//   Σ_p w_p         = Σ_j e^(s_j − M)             (the softmax denominator at M)
//   Σ_p w_p · out_p = Σ_j e^(s_j − M) · v_j       (the numerator at M)
// so softmax(s) · V = Σ_p w_p · out_p / Σ_p w_p, in any order of the p and for
// any way of cutting the keys. Every exponent is ≤ 0, so nothing overflows.
// Empty partials get w_p = 0 (skipped: e^(−∞ − M) would be NaN when M = −∞
// too); when every partial is empty the result is 0, not NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/host_device.h"

namespace tpserve::cuda {

TPSERVE_HOST_DEVICE inline float MergeExp(float x) { return expf(x); }
TPSERVE_HOST_DEVICE inline double MergeExp(double x) { return exp(x); }

// The (max, sum) of one partial, or of a union of partials.
template <typename F>
struct SoftmaxStats {
  F max;
  F sum;
};

// w_p = sum_p · e^(max_p − M): partial p's share of the union's denominator
// (M = the union's max); 0 for an empty partial.
template <typename F>
TPSERVE_HOST_DEVICE inline F PartialWeight(F max_p, F sum_p, F union_max) {
  return sum_p > F(0) ? sum_p * MergeExp(max_p - union_max) : F(0);
}

// The stats of the union of n partials: (M, Σ_p w_p). (−∞, 0) when all are empty.
template <typename F>
TPSERVE_HOST_DEVICE inline SoftmaxStats<F> MergeStats(const F* max /*[n]*/, const F* sum /*[n]*/, int n) {
  F m = F(-INFINITY);
  for (int p = 0; p < n; ++p) {
    if (sum[p] > F(0) && max[p] > m) m = max[p];
  }
  F total = F(0);
  for (int p = 0; p < n; ++p) total += PartialWeight(max[p], sum[p], m);
  return {m, total};
}

// One element of the union's normalised output: Σ_p w_p · out_p / Σ_p w_p,
// with out_p = out[p · out_stride] (one dimension d of partial p's row).
// 0 when every partial is empty.
template <typename F>
TPSERVE_HOST_DEVICE inline F CombinePartials(const F* max /*[n]*/, const F* sum /*[n]*/,
                                             const F* out /*[n] strided*/, int64_t out_stride, int n) {
  const SoftmaxStats<F> all = MergeStats(max, sum, n);
  if (!(all.sum > F(0))) return F(0);
  F num = F(0);
  for (int p = 0; p < n; ++p) {
    if (sum[p] > F(0)) num += PartialWeight(max[p], sum[p], all.max) * out[p * out_stride];
  }
  return num / all.sum;
}

// The workspace of softmax partials of P pieces per (token, query head), for
// n tokens (the split decode paths: attention.cuh, decode_attention.cuh).
struct SplitWorkspace {
  float* out;  // [n, Hq, P, hd] normalised rows
  float* max;  // [n, Hq, P]
  float* sum;  // [n, Hq, P]
};

TPSERVE_HOST_DEVICE inline SplitWorkspace CarveWorkspace(float* base, int64_t n, int num_heads, int head_dim,
                                                         int P) {
  const int64_t rows = n * num_heads * P;  // one per (token, head, partition)
  return {base, base + rows * head_dim, base + rows * head_dim + rows};
}

}  // namespace tpserve::cuda
