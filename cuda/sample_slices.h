// Planning and integer math of the sliced sampler (sampling_sliced.cuh): how a
// row is cut into slices, the fixed-point weights every mass is summed in, and
// the radix-select digit pick. Host and device code (no CUDA needed to include
// it), unit-tested on the CPU (tests/cuda/sample_slices_test.cc).
//
// At a small batch one block per row (sampling.cuh) leaves most SMs idle and
// walks its row ~32-64 times. The sliced path cuts each row into `slices`
// contiguous id ranges of `slice_size` ids (the last may be shorter) and runs
// one block per (row, slice), for as many blocks as fill about
// kSliceTargetWaves waves of kSliceBlocksPerSm blocks on every SM, but no
// block with fewer than about kSliceMinIds ids.
//
// Masses are fixed-point: a weight w in (0, 1] (the row's best token has
// w = 1) counts as MassFx(w) = floor(w · 2^kMassFracBits), an int64. Integer
// sums do not depend on their order, so partial sums may be added by atomics
// and still give the same bits on every run and in every block. A row's mass
// is below V · 2^kMassFracBits <= 2^63 for V <= kMaxSlicedVocab. Precision
// against the host sampler's fp64 weights: each weight is within 2^-44 (and
// the fp32 expf's ulp) of its fp64 value, so a row's mass is within
// V · 2^-44 (8.6e-9 at V = 151,936) of the host's, relative to the best
// token's weight; a token whose weight is below 2^-44 carries no mass, so it
// is never drawn (the host draws it with probability below 2^-44 / mass).
#pragma once

#include <cstdint>

#include "cuda/host_device.h"

namespace tpserve::cuda {

inline constexpr int kSliceThreads = 256;    // threads of every sliced-sampler block
inline constexpr int kSliceMinIds = 1024;    // ids a block is worth, at the fewest
inline constexpr int kSliceBlocksPerSm = 2;  // blocks of a wave per SM
inline constexpr int kSliceTargetWaves = 1;  // waves the grid fills, at most (when rows allow)
inline constexpr int kSliceIdGranule = 32;   // slice sizes are multiples of this
inline constexpr int kMassFracBits = 44;
inline constexpr int32_t kMaxSlicedVocab = int32_t{1} << (63 - kMassFracBits);  // 524,288
// Radix select over the 32-bit ordered key in 3 passes of 11, 11 and 10 bits
// (one launch fewer per select than 4 x 8 bits; 2048 bins still fit a
// block's shared memory twice, counts and masses).
inline constexpr int kRadixPasses = 3;
inline constexpr int kRadixBits = 11;  // the widest pass
inline constexpr int kRadixBins = 1 << kRadixBits;
// Key bits pass `pass` decides, and how far its digit is shifted in the key.
TPSERVE_HOST_DEVICE constexpr int RadixBitsOf(int pass) { return pass < 2 ? 11 : 10; }
TPSERVE_HOST_DEVICE constexpr int RadixShiftOf(int pass) { return pass == 0 ? 21 : pass == 1 ? 10 : 0; }
// The key bits the passes before `pass` decided.
TPSERVE_HOST_DEVICE constexpr uint32_t RadixPrefixMask(int pass) {
  return pass == 0 ? 0u : ~0u << RadixShiftOf(pass - 1);
}
// Pass `pass`'s digit of a key, in [0, 2^RadixBitsOf(pass)).
TPSERVE_HOST_DEVICE constexpr uint32_t RadixDigit(uint32_t key, int pass) {
  return (key >> RadixShiftOf(pass)) & ((1u << RadixBitsOf(pass)) - 1u);
}
static_assert(RadixShiftOf(kRadixPasses - 1) == 0 && RadixShiftOf(0) + RadixBitsOf(0) == 32 &&
                  RadixShiftOf(1) + RadixBitsOf(1) == RadixShiftOf(0) &&
                  RadixShiftOf(2) + RadixBitsOf(2) == RadixShiftOf(1),
              "the passes cover the 32 key bits, most significant first");

struct SlicePlan {
  int32_t slices = 1;      // blocks per row
  int32_t slice_size = 1;  // ids per slice, a multiple of kSliceIdGranule (the last slice may be shorter)
};

TPSERVE_HOST_DEVICE constexpr int64_t SliceCeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks a launch aims at: kSliceTargetWaves waves on `sm_count` SMs (<= 0 counts as 1).
TPSERVE_HOST_DEVICE constexpr int64_t SliceTargetBlocks(int sm_count) {
  return int64_t{kSliceTargetWaves} * kSliceBlocksPerSm * (sm_count > 0 ? sm_count : 1);
}

// The plan for `rows` rows (>= 1) of `vocab` ids (>= 1): slices = the target
// blocks per row, at most vocab / kSliceMinIds (so no slice is below
// kSliceMinIds ids when there are several), at least 1; every slice non-empty.
TPSERVE_HOST_DEVICE constexpr SlicePlan PlanSlices(int64_t rows, int32_t vocab, int sm_count) {
  const int64_t fit = SliceTargetBlocks(sm_count) / (rows > 0 ? rows : 1);
  const int64_t cap = vocab / kSliceMinIds > 1 ? vocab / kSliceMinIds : 1;
  const int64_t want = fit < 1 ? 1 : fit > cap ? cap : fit;
  SlicePlan plan;
  plan.slice_size = static_cast<int32_t>(SliceCeilDiv(SliceCeilDiv(vocab > 0 ? vocab : 1, want), kSliceIdGranule) *
                                         kSliceIdGranule);
  plan.slices = static_cast<int32_t>(SliceCeilDiv(vocab > 0 ? vocab : 1, plan.slice_size));
  return plan;
}

// Slice s covers ids [SliceBegin, SliceEnd).
TPSERVE_HOST_DEVICE constexpr int32_t SliceBegin(const SlicePlan& plan, int32_t s) { return s * plan.slice_size; }
TPSERVE_HOST_DEVICE constexpr int32_t SliceEnd(const SlicePlan& plan, int32_t s, int32_t vocab) {
  return (s + 1) * plan.slice_size < vocab ? (s + 1) * plan.slice_size : vocab;
}

// Fixed-point mass of a weight w in [0, 1]: w · 2^44 is exact in fp32 (a
// power-of-two scale), the conversion truncates (alike on host and device).
TPSERVE_HOST_DEVICE inline int64_t MassFx(float w) {
  return static_cast<int64_t>(w * static_cast<float>(int64_t{1} << kMassFracBits));
}

// Radix select, one pass: bins[b] is the count (or mass) of the candidates
// whose next digit is b; `need` (>= 1) is how much of it the prefix must
// still take, from the largest digit down. The picked digit b has
// above < need <= above + bins[b], above = Σ bins over the digits > b; that
// holds for exactly one b (bins[b] > 0) when need <= Σ bins.
TPSERVE_HOST_DEVICE constexpr bool IsPickedDigit(int64_t above, int64_t bin, int64_t need) {
  return above < need && need <= above + bin;
}

struct DigitPick {
  int32_t digit = 0;  // 0 when need exceeds the sum (not reached by a consistent select)
  int64_t above = 0;  // Σ bins over the digits > digit
};

// The serial pick (the kernels run the same test over a block scan).
TPSERVE_HOST_DEVICE inline DigitPick PickDigit(const int64_t* bins, int64_t need) {
  int64_t above = 0;
  for (int32_t b = kRadixBins - 1; b >= 0; --b) {
    if (IsPickedDigit(above, bins[b], need)) return DigitPick{b, above};
    above += bins[b];
  }
  return DigitPick{};
}

// Top-p: the mass the shortest kept prefix must reach, top_p · total rounded
// up, at least 1 (so at least the best token is kept).
TPSERVE_HOST_DEVICE inline int64_t TopPNeed(float top_p, int64_t total) {
  const double t = static_cast<double>(top_p) * static_cast<double>(total);
  int64_t need = static_cast<int64_t>(t);
  if (static_cast<double>(need) < t) ++need;
  return need < 1 ? 1 : need > total ? total : need;
}

// Top-p inside the cut key's tie group of `group` tokens of mass `wc` each:
// how many (in id order) reach the `remaining` mass (> 0), as RowSampler::TopP:
// ceil(remaining / wc) in [1, group]; all of them when wc is 0.
TPSERVE_HOST_DEVICE constexpr int64_t TieTokensNeeded(int64_t remaining, int64_t wc, int64_t group) {
  if (wc <= 0) return group;
  const int64_t n = (remaining + wc - 1) / wc;
  return n < 1 ? 1 : n > group ? group : n;
}

// Of a tie group whose first `kept` tokens (id order) are kept, those in a
// slice holding `in_slice` of them after `before` in earlier slices.
TPSERVE_HOST_DEVICE constexpr int64_t TieQuota(int64_t kept, int64_t before, int64_t in_slice) {
  const int64_t q = kept - before;
  return q < 0 ? 0 : q > in_slice ? in_slice : q;
}

// The inverse-CDF draw at uniform u in [0, 1) over a kept mass `total`: the
// first kept token whose cumulative mass exceeds DrawThreshold (none when it
// is >= total: then the last kept token, as RowSampler::InverseCdf).
TPSERVE_HOST_DEVICE inline int64_t DrawThreshold(double u, int64_t total) {
  return static_cast<int64_t>(u * static_cast<double>(total));
}

}  // namespace tpserve::cuda
