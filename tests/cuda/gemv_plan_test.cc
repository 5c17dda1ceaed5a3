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

// The SiLU-mul GEMV pairs gate row j with up row F + j in one block: at least
// two columns per block, every feature in exactly one block, and PlanGemv's
// split of the 2F rows wherever that already has two columns or more.
TEST(GemvPlan, SiluMulPlanPairsGateAndUpRows) {
  for (int sms : {1, 132}) {
    for (int64_t F : {int64_t{1}, int64_t{7}, int64_t{19}, int64_t{3072}, int64_t{8192}}) {
      for (int64_t K : {8, 1024, 2048, 8 * 4096}) {
        SCOPED_TRACE(::testing::Message() << "F=" << F << " K=" << K << " SMs=" << sms);
        const GemvPlan p = PlanGemvSiluMul(F, K, sms), g = PlanGemv(2 * F, K, sms);
        EXPECT_GE(p.cols_per_block, 2);
        EXPECT_EQ(p.cols_per_block * p.k_split, kGemvWarps);
        EXPECT_EQ(p.blocks, (F + p.cols_per_block / 2 - 1) / (p.cols_per_block / 2));
        if (g.cols_per_block >= 2) {
          EXPECT_EQ(p.k_split, g.k_split);
        }
      }
    }
  }
  // Qwen3-0.6B's gate_up (F 3072, K 1024) on an H200: 8 columns (4 features) a block, no split.
  const GemvPlan qwen = PlanGemvSiluMul(3072, 1024, kH200Sms);
  EXPECT_EQ(qwen.cols_per_block, 8);
  EXPECT_EQ(qwen.blocks, 768);
  // A long row and a narrow F: PlanGemv's one-column split becomes two columns over 4 warps each.
  const GemvPlan narrow = PlanGemvSiluMul(1, 8 * 4096, kH200Sms);
  EXPECT_EQ(narrow.cols_per_block, 2);
  EXPECT_EQ(narrow.k_split, 4);
  EXPECT_EQ(narrow.blocks, 1);
}

}  // namespace
}  // namespace tpserve::cuda
