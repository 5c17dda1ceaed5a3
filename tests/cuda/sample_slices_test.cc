// The sliced sampler's planning and integer math (cuda/sample_slices.h), on
// the CPU: slices cover every id exactly once within the target blocks; the
// radix digit pick against a brute-force search; top-p's rounded need; the
// tie quotas of slices summing to the kept count; the fixed-point mass bound.
#include "cuda/sample_slices.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/testing/seed.h"

namespace tpserve::cuda {
namespace {

constexpr int kH200Sms = 132;

TEST(SampleSlices, PlanCoversEveryIdOnceWithinTheTarget) {
  for (int sms : {0, 1, 8, kH200Sms}) {
    for (int64_t rows : {1, 2, 3, 7, 64, 131, 132, 264, 1000}) {
      for (int32_t vocab : {1, 7, 32, 1031, 4097, 128256, 151936, kMaxSlicedVocab}) {
        SCOPED_TRACE(::testing::Message() << "sms " << sms << " rows " << rows << " vocab " << vocab);
        const SlicePlan plan = PlanSlices(rows, vocab, sms);
        ASSERT_GE(plan.slices, 1);
        EXPECT_EQ(plan.slice_size % kSliceIdGranule, 0);
        // Every id in exactly one slice, no slice empty.
        int64_t covered = 0;
        for (int32_t s = 0; s < plan.slices; ++s) {
          const int32_t begin = SliceBegin(plan, s), end = SliceEnd(plan, s, vocab);
          ASSERT_LT(begin, end) << "slice " << s << " is empty";
          ASSERT_EQ(begin, covered);
          covered = end;
        }
        EXPECT_EQ(covered, vocab);
        // Within the target blocks (or one block per row), and no slice far below kSliceMinIds.
        EXPECT_LE(rows * plan.slices, std::max<int64_t>(SliceTargetBlocks(sms), rows));
        if (plan.slices > 1) {
          EXPECT_GE(plan.slice_size, kSliceMinIds);
        }
      }
    }
  }
  // The issue-12 case: batch 1 of Qwen's vocabulary on an H200 spreads over many SMs.
  const SlicePlan qwen = PlanSlices(1, 151936, kH200Sms);
  EXPECT_GE(qwen.slices, 100);
  EXPECT_EQ(PlanSlices(SliceTargetBlocks(kH200Sms), 151936, kH200Sms).slices, 1);
}

// The 3 passes' digits (11, 11, 10 bits) rebuild the key, most significant
// first, and each pass's prefix mask covers exactly the earlier passes' bits.
TEST(SampleSlices, RadixPassesSplitTheKey) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int n = 0; n < 1000; ++n) {
    const uint32_t key = n == 0 ? 0u : n == 1 ? ~0u : static_cast<uint32_t>(rng());
    uint32_t rebuilt = 0;
    for (int pass = 0; pass < kRadixPasses; ++pass) {
      EXPECT_EQ(key & RadixPrefixMask(pass), rebuilt) << "pass " << pass;
      EXPECT_LT(RadixDigit(key, pass), 1u << RadixBitsOf(pass));
      EXPECT_LE(RadixBitsOf(pass), kRadixBits);
      rebuilt |= RadixDigit(key, pass) << RadixShiftOf(pass);
    }
    EXPECT_EQ(rebuilt, key);
  }
}

TEST(SampleSlices, PickDigitMatchesABruteForceSearch) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> bins(kRadixBins, 0);
    const int filled = 1 + static_cast<int>(rng() % 20);
    for (int f = 0; f < filled; ++f) bins[rng() % kRadixBins] += 1 + static_cast<int64_t>(rng() % 1000);
    int64_t sum = 0;
    for (int64_t v : bins) sum += v;
    const int64_t need = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(sum));
    // Brute force: the largest digit whose suffix sum reaches need.
    int32_t want = -1;
    for (int32_t b = kRadixBins - 1; b >= 0 && want < 0; --b) {
      int64_t suffix = 0;
      for (int32_t c = b; c < kRadixBins; ++c) suffix += bins[c];
      if (suffix >= need) want = b;
    }
    const DigitPick got = PickDigit(bins.data(), need);
    ASSERT_EQ(got.digit, want) << "trial " << trial << " need " << need;
    int64_t above = 0;
    for (int32_t c = want + 1; c < kRadixBins; ++c) above += bins[c];
    EXPECT_EQ(got.above, above);
    EXPECT_GT(bins[got.digit], 0);
    // Exactly one digit passes the test the kernels run per thread.
    int passing = 0;
    int64_t run = 0;
    for (int32_t b = kRadixBins - 1; b >= 0; --b) {
      passing += IsPickedDigit(run, bins[b], need) ? 1 : 0;
      run += bins[b];
    }
    EXPECT_EQ(passing, 1);
  }
}

TEST(SampleSlices, TopPNeedRoundsUpAndKeepsTheBestToken) {
  EXPECT_EQ(TopPNeed(0.5f, 1000), 500);
  EXPECT_EQ(TopPNeed(0.5f, 1001), 501);
  EXPECT_EQ(TopPNeed(1e-9f, 1000), 1);  // at least the best token
  EXPECT_EQ(TopPNeed(1.0f, 12345), 12345);
  const int64_t one = int64_t{1} << kMassFracBits;
  EXPECT_EQ(TopPNeed(0.25f, 8 * one), 2 * one);
}

TEST(SampleSlices, TieQuotasOfTheSlicesSumToTheKeptCount) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> ties(1 + rng() % 40);
    int64_t group = 0;
    for (int64_t& t : ties) group += (t = static_cast<int64_t>(rng() % 5));
    if (group == 0) continue;
    const int64_t kept = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(group));
    int64_t before = 0, sum = 0;
    bool partial_seen = false;
    for (int64_t t : ties) {
      const int64_t q = TieQuota(kept, before, t);
      ASSERT_GE(q, 0);
      ASSERT_LE(q, t);
      if (q > 0 && q < t) {
        EXPECT_FALSE(partial_seen) << "two slices split the group";
        partial_seen = true;
      }
      sum += q;
      before += t;
    }
    EXPECT_EQ(sum, kept);
  }
  EXPECT_EQ(TieTokensNeeded(10, 3, 100), 4);
  EXPECT_EQ(TieTokensNeeded(9, 3, 100), 3);
  EXPECT_EQ(TieTokensNeeded(1000, 3, 100), 100);
  EXPECT_EQ(TieTokensNeeded(5, 0, 7), 7);  // weights below the fixed point's resolution: all of them
}

TEST(SampleSlices, FixedPointMassAndDrawThreshold) {
  const int64_t one = int64_t{1} << kMassFracBits;
  EXPECT_EQ(MassFx(1.0f), one);
  EXPECT_EQ(MassFx(0.5f), one / 2);
  EXPECT_EQ(MassFx(0.0f), 0);
  EXPECT_EQ(MassFx(std::ldexp(1.0f, -45)), 0);  // below the resolution
  EXPECT_EQ(MassFx(std::ldexp(1.0f, -44)), 1);
  EXPECT_LT(MassFx(0.3f), MassFx(0.30001f));
  // The largest row mass fits an int64.
  EXPECT_LE(static_cast<double>(kMaxSlicedVocab) * static_cast<double>(one), std::ldexp(1.0, 63));
  EXPECT_EQ(DrawThreshold(0.0, 1000), 0);
  EXPECT_EQ(DrawThreshold(0.5, 1001), 500);
  EXPECT_LT(DrawThreshold(0.999999999, 1000), 1000);
}

}  // namespace
}  // namespace tpserve::cuda
