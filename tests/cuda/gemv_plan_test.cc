// The small-batch GEMV's split (cuda/gemv_plan.h), on the CPU: every column
// covered once, split-K only when N cannot fill the GPU and every lane of a
// split still has a 16-byte chunk of K.
#include "cuda/gemv_plan.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tpserve::cuda {
namespace {

constexpr int kH200Sms = 132;

void ExpectValid(const GemvPlan& p, int64_t N, int64_t K) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " K=" << K);
  EXPECT_TRUE(p.cols_per_block == 1 || p.cols_per_block == 2 || p.cols_per_block == 4 || p.cols_per_block == 8);
  EXPECT_EQ(p.cols_per_block * p.k_split, kGemvWarps);
  EXPECT_EQ(p.blocks, (N + p.cols_per_block - 1) / p.cols_per_block) << "every column in exactly one block";
  if (p.k_split > 1) {
    EXPECT_GE(K / kGemvElemsPerLoad, int64_t{p.k_split} * 32) << "a lane of the split would have no chunk";
  }
}

TEST(GemvPlan, Qwen3ProjectionsOnAnH200) {
  // qkv 1024 -> 4096 and gate_up 1024 -> 6144: wide enough without splitting K.
  for (int64_t N : {4096, 6144}) {
    const GemvPlan p = PlanGemv(N, 1024, kH200Sms);
    ExpectValid(p, N, 1024);
    EXPECT_EQ(p.cols_per_block, 8);
    EXPECT_EQ(p.k_split, 1);
  }
  // o 2048 -> 1024 and down 3072 -> 1024: 128 blocks of 8 columns would leave
  // SMs idle, so K is split over 4 warps and 512 blocks fill 2 per SM.
  for (int64_t K : {2048, 3072}) {
    const GemvPlan p = PlanGemv(1024, K, kH200Sms);
    ExpectValid(p, 1024, K);
    EXPECT_EQ(p.cols_per_block, 2);
    EXPECT_EQ(p.k_split, 4);
    EXPECT_GE(p.blocks, 2 * kH200Sms);
  }
}

TEST(GemvPlan, SplitsKOnlyAsFarAsTheRowAllows) {
  // K = 256: 32 chunks, one per lane of one warp: no split however narrow N is.
  EXPECT_EQ(PlanGemv(1, 256, kH200Sms).k_split, 1);
  // K = 512: two warps' worth.
  EXPECT_EQ(PlanGemv(1, 512, kH200Sms).k_split, 2);
  // Long rows and one column: every warp of the block on that column.
  const GemvPlan one = PlanGemv(1, 8 * 4096, kH200Sms);
  EXPECT_EQ(one.k_split, kGemvWarps);
  EXPECT_EQ(one.blocks, 1);
  // K below one chunk per lane (the GEMV still runs: lanes past K idle).
  EXPECT_EQ(PlanGemv(3, 8, kH200Sms).k_split, 1);
}

TEST(GemvPlan, CoversEveryShape) {
  for (int sms : {0, 1, 2, 108, 132}) {
    for (int64_t N : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{9}, int64_t{1023}, int64_t{151936}}) {
      for (int64_t K : {8, 24, 256, 264, 4104, 8 * 4096 + 8}) {
        ExpectValid(PlanGemv(N, K, sms), N, K);
      }
    }
  }
}

TEST(GemvPlan, WideOutputsNeverSplit) {
  // A vocabulary-wide LM head has blocks for every SM many times over.
  const GemvPlan p = PlanGemv(151936, 1024, kH200Sms);
  EXPECT_EQ(p.cols_per_block, 8);
  EXPECT_EQ(p.blocks, 151936 / 8);
}

}  // namespace
}  // namespace tpserve::cuda
