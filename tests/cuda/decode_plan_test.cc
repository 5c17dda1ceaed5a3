// The partition planning of the fast decode attention (cuda/decode_plan.h),
// on the CPU: the grid's waves, the partitions' cover of every key exactly
// once, the edge contexts, a grid fixed for a CUDA graph serving other
// contexts, and the workspace bound the backend reserves.
#include "cuda/decode_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tpserve::cuda {
namespace {

constexpr int kH200Sms = 132;

double Waves(const DecodePlanInput& in, const DecodePlan& plan) {
  return static_cast<double>(in.num_tokens * in.num_kv_heads * plan.splits) /
         (static_cast<double>(in.sm_count) * in.blocks_per_sm);
}

// Every key 0 .. context-1 is in exactly one partition owned by exactly one
// of the used blocks, and blocks z >= used own none.
void ExpectExactCover(int context, const DecodePlan& plan) {
  SCOPED_TRACE(::testing::Message() << "context " << context << " splits " << plan.splits << " partition_size "
                                    << plan.partition_size);
  const int used = DecodeUsedSplits(context, plan);
  ASSERT_GE(used, 1);
  ASSERT_LE(used, plan.splits);
  std::vector<int> seen(static_cast<size_t>(context), 0);
  for (int z = 0; z < plan.splits; ++z) {  // the kernel's loop, block by block
    int keys = 0;
    for (int p = z; p < DecodePartitions(context, plan); p += plan.splits) {
      const int begin = p * plan.partition_size;
      const int end = std::min(context, begin + plan.partition_size);
      ASSERT_LT(begin, end);
      for (int j = begin; j < end; ++j) ++seen[static_cast<size_t>(j)];
      keys += end - begin;
    }
    EXPECT_EQ(keys > 0, z < used) << "block " << z;
  }
  for (int j = 0; j < context; ++j) ASSERT_EQ(seen[static_cast<size_t>(j)], 1) << "key " << j;
}

TEST(DecodePlan, LongContextsGetTwoToFourWaves) {
  for (int64_t tokens : {1, 2, 8, 64, 256}) {
    for (int hkv : {1, 2, 4, 8}) {
      for (int per_sm : {1, 2, 5, 8}) {
        const DecodePlanInput in{tokens, hkv, 32768, kH200Sms, false, per_sm};
        const DecodePlan plan = PlanDecode(in);
        SCOPED_TRACE(::testing::Message() << tokens << " tokens x " << hkv << " KV heads, " << per_sm
                                          << " blocks per SM: " << plan.splits << " splits, " << Waves(in, plan)
                                          << " waves");
        if (plan.splits > 1) {
          EXPECT_LE(Waves(in, plan), kDecodeMaxWaves);
        }
        const bool capped = plan.splits == DecodeSplitCap(in.context);  // 256-key partitions already
        if (!capped && tokens * hkv <= 2 * kH200Sms * per_sm) {
          EXPECT_GE(Waves(in, plan), 2.0);
        }
        if (tokens * hkv > kDecodeMaxWaves * kH200Sms * per_sm) {
          EXPECT_EQ(plan.splits, 1);
        }
      }
    }
  }
  // Blocks per SM beyond what the workspace is sized for count as the most.
  EXPECT_EQ(PlanDecode({64, 8, 32768, kH200Sms, false, 100}).splits,
            PlanDecode({64, 8, 32768, kH200Sms, false, kDecodeMaxBlocksPerSm}).splits);
  // Qwen3-0.6B shapes at batch 1: 32768 keys over 128 blocks of 256 keys.
  EXPECT_EQ(PlanDecode({1, 8, 32768, kH200Sms, false, 2}).splits, 128);
  // Batch 8 over 8 KV heads at 8192 keys, 2 blocks per SM: 1056 / 64 = 16
  // splits of 512 keys, 4 waves.
  const DecodePlan b8 = PlanDecode({8, 8, 8192, kH200Sms, false, 2});
  EXPECT_EQ(b8.splits, 16);
  EXPECT_EQ(b8.partition_size, 512);
}

TEST(DecodePlan, ShortContextsAreNotCutBelowTheMinimumPartition) {
  for (int64_t context : {1, 2, 255, 256, 257, 511, 512, 513, 1000}) {
    const DecodePlan plan = PlanDecode({1, 1, context, kH200Sms, false});
    EXPECT_EQ(plan.splits, (context + kDecodeMinPartition - 1) / kDecodeMinPartition) << context;
    EXPECT_EQ(plan.partition_size % kDecodeKeyGranule, 0) << context;
    // The planned context is served by every split, each within a partition.
    EXPECT_EQ(DecodeUsedSplits(static_cast<int>(context), plan), plan.splits) << context;
  }
  // Context 1: one block writes the output (no combine).
  const DecodePlan one = PlanDecode({4, 2, 1, kH200Sms, false});
  EXPECT_EQ(one.splits, 1);
  EXPECT_EQ(DecodeUsedSplits(1, one), 1);
  ExpectExactCover(1, one);
}

TEST(DecodePlan, ExactlyOnePartitionUsesOneBlock) {
  const DecodePlan plan{8, 256};
  EXPECT_EQ(DecodeUsedSplits(256, plan), 1);  // exactly a partition
  EXPECT_EQ(DecodeUsedSplits(257, plan), 2);  // one key past it
  EXPECT_EQ(DecodeUsedSplits(8 * 256, plan), 8);
  EXPECT_EQ(DecodeUsedSplits(8 * 256 + 1, plan), 8);  // block 0 takes partitions 0 and 8
  for (int context : {1, 255, 256, 257, 2048, 2049, 5000}) ExpectExactCover(context, plan);
}

TEST(DecodePlan, PartitionsCoverEveryKeyOnceForAnyPlan) {
  // Partition sizes that do not divide the page sizes 7, 16, 48: boundaries
  // mid-page are the kernel's business (it maps each key through the table).
  for (const DecodePlan plan : {DecodePlan{1, 3}, DecodePlan{3, 100}, DecodePlan{5, 32}, DecodePlan{16, 256}}) {
    for (int context : {1, 2, 3, 31, 32, 33, 99, 100, 101, 299, 300, 301, 1500, 4097}) {
      ExpectExactCover(context, plan);
    }
  }
  for (int64_t tokens : {1, 3, 64}) {
    for (int64_t context : {1, 17, 256, 700, 4097, 32768}) {
      const DecodePlan plan = PlanDecode({tokens, 2, context, kH200Sms, false});
      ExpectExactCover(static_cast<int>(context), plan);
    }
  }
}

TEST(DecodePlan, FixedGridServesEveryContextUpToTheCapacity) {
  const int64_t capacity = 40960;  // Qwen3's max_position_embeddings
  for (int block_keys : {32, 64, 128}) {  // the SIMT kernel at hd 128, the tensor-core one at hd 128 and 64
    const DecodePlan plan = PlanDecode({1, 8, capacity, kH200Sms, true, 2, block_keys});
    SCOPED_TRACE(::testing::Message() << "block_keys " << block_keys);
    // Batch 1 splits: partitions of one block iteration, so short contexts spread.
    EXPECT_GT(plan.splits, 1);
    EXPECT_EQ(plan.partition_size, block_keys);
    // The grid depends on sizes fixed for a bucket, never on a step's context.
    EXPECT_EQ(plan.splits, PlanDecode({1, 8, capacity, kH200Sms, true, 2, block_keys}).splits);
    for (int context : {1, 31, 32, 33, 255, 256, 257, 512, 1000, 4096, 20000, 40960}) {
      ExpectExactCover(context, plan);
      // A replay with a short context still spreads over as many blocks as it can.
      const int parts = (context + block_keys - 1) / block_keys;
      EXPECT_EQ(DecodeUsedSplits(context, plan), std::min(parts, plan.splits)) << context;
    }
  }
  // Issue 31's case: batch 1 at context 512, the SIMT kernel's 32 keys a
  // block iteration: 16 blocks per KV head, one iteration each (256-key
  // partitions gave 2 blocks of 8 iterations).
  EXPECT_EQ(DecodeUsedSplits(512, PlanDecode({1, 8, capacity, kH200Sms, true, 2, 32})), 16);
  // A block iteration below the granule is rounded up to it.
  EXPECT_EQ(PlanDecode({1, 8, capacity, kH200Sms, true, 2, 16}).partition_size, kDecodeKeyGranule);
  // Enough tokens x KV heads for one split: the block takes every key anyway,
  // in kDecodeMinPartition pieces.
  const DecodePlan full = PlanDecode({256, 8, capacity, kH200Sms, true, 2, 32});
  EXPECT_EQ(full.splits, 1);
  EXPECT_EQ(full.partition_size, kDecodeMinPartition);
  for (int context : {1, 700, 40960}) ExpectExactCover(context, full);
}

TEST(DecodePlan, WorkspaceBoundHoldsForEveryLaunch) {
  for (int sms : {1, 132}) {
    for (int64_t max_tokens : {1, 7, 64, 256, 1024}) {
      for (int64_t context : {1, 300, 4096, 40960}) {
        const int64_t bound = DecodeWorkspacePartials(max_tokens, context, sms);
        for (int64_t n = 1; n <= max_tokens; n = n < 16 ? n + 1 : n * 2) {
          for (int hkv : {1, 2, 8}) {
            for (int64_t ctx : {int64_t{1}, context / 2, context}) {
              for (int per_sm : {1, 3, kDecodeMaxBlocksPerSm, 1000}) {
                for (bool fixed : {false, true}) {
                  const DecodePlan plan = PlanDecode({n, hkv, ctx, sms, fixed, per_sm});
                  EXPECT_LE(n * plan.splits, bound) << "n " << n << " Hkv " << hkv << " context " << ctx;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(DecodePlan, DegenerateInputsStillPlanOneValidSplit) {
  const DecodePlan plan = PlanDecode({0, 0, 0, 0, false});
  EXPECT_EQ(plan.splits, 1);
  EXPECT_GE(plan.partition_size, 1);
  EXPECT_LE(PlanDecode({1, 1, int64_t{1} << 40, kH200Sms, false}).splits, kDecodeMaxSplits);
}

}  // namespace
}  // namespace tpserve::cuda
