// The workers' KV block budgets. CPU: a share of MemAvailable, split among the
// local ranks, capped by what the scheduler can ever hold.
#include "worker_service/memory_budget.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

CpuKvBudget Budget() {
  CpuKvBudget b;
  b.available_bytes = uint64_t{8} << 30;  // 8 GiB
  b.utilization = 0.9;
  b.local_ranks = 2;
  b.block_bytes = 3 << 20;  // 3 MiB
  b.max_num_seqs = 256;
  b.max_model_len = 4097;
  b.block_size = 16;
  return b;
}

TEST(CpuKvBudget, HalfOfAvailableMemorySplitAmongLocalRanks) {
  // 8 GiB * min(0.9, 0.5) / 2 ranks / 3 MiB = 682.67 -> 682 (cap 256 * 257 is far above).
  absl::StatusOr<int64_t> blocks = CpuKvBlocks(Budget());
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(*blocks, 682);
  CpuKvBudget low = Budget();
  low.utilization = 0.25;  // below the cap: taken as is
  EXPECT_EQ(*CpuKvBlocks(low), 341);
}

TEST(CpuKvBudget, CappedByTheLongestSequencesTheSchedulerCanHold) {
  CpuKvBudget b = Budget();
  b.max_num_seqs = 3;
  b.max_model_len = 33;  // 3 blocks of 16 each
  EXPECT_EQ(*CpuKvBlocks(b), 9);
}

TEST(CpuKvBudget, ErrorsSayWhatIsWrong) {
  CpuKvBudget b = Budget();
  b.utilization = 1.5;
  EXPECT_EQ(CpuKvBlocks(b).status().code(), absl::StatusCode::kInvalidArgument);
  b = Budget();
  b.block_bytes = 0;
  EXPECT_EQ(CpuKvBlocks(b).status().code(), absl::StatusCode::kInvalidArgument);
  b = Budget();
  b.available_bytes = 1 << 20;
  absl::StatusOr<int64_t> none = CpuKvBlocks(b);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("not one KV block"), std::string::npos) << none.status();
}

TEST(CpuKvBudget, ReadsMemAvailable) {
  absl::StatusOr<uint64_t> bytes = MemAvailableBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_GT(*bytes, uint64_t{1} << 20);
}

GpuKvBudget H200() {
  GpuKvBudget b;
  b.total_bytes = uint64_t{140} << 30;
  b.free_bytes = uint64_t{120} << 30;  // 20 GiB used by weights, activations, workspaces
  b.utilization = 0.9;
  b.block_bytes = 2 << 20;  // 2 MiB
  b.max_num_seqs = 256;
  b.max_model_len = 131072;
  b.block_size = 16;
  return b;
}

TEST(GpuKvBudget, WhatIsLeftOfTheUtilisedShareAfterTheProfile) {
  // (140 * 0.9 - 20) GiB = 106 GiB = 54272 blocks of 2 MiB.
  absl::StatusOr<int64_t> blocks = GpuKvBlocks(H200());
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(*blocks, 54272);
  GpuKvBudget reserve = H200();
  reserve.reserve_bytes = uint64_t{1} << 30;  // 1 GiB kept for graphs = 512 blocks
  EXPECT_EQ(*GpuKvBlocks(reserve), 54272 - 512);
}

TEST(GpuKvBudget, RanksSharingOneGpuSplitIt) {
  GpuKvBudget b = H200();
  b.ranks_per_device = 2;
  EXPECT_EQ(*GpuKvBlocks(b), 27136);
  b.ranks_per_device = 3;  // 106 GiB / 3 = 18090.67 blocks
  EXPECT_EQ(*GpuKvBlocks(b), 18090);
}

TEST(GpuKvBudget, CappedByTheLongestSequencesTheSchedulerCanHold) {
  GpuKvBudget b = H200();
  b.max_num_seqs = 5;
  b.max_model_len = 100;  // 7 blocks of 16 each
  EXPECT_EQ(*GpuKvBlocks(b), 35);
}

TEST(GpuKvBudget, NoRoomIsResourceExhaustedAndSaysWhatToChange) {
  GpuKvBudget b = H200();
  b.free_bytes = uint64_t{10} << 30;  // 130 GiB used > 126 GiB allowed
  absl::StatusOr<int64_t> blocks = GpuKvBlocks(b);
  ASSERT_EQ(blocks.status().code(), absl::StatusCode::kResourceExhausted) << blocks.status();
  EXPECT_NE(blocks.status().message().find("130.00 GiB of the GPU's 140.00 GiB"), std::string::npos)
      << blocks.status();
  EXPECT_NE(blocks.status().message().find("--gpu-memory-utilization"), std::string::npos);
  EXPECT_NE(blocks.status().message().find("--tp"), std::string::npos);
  b = H200();
  b.block_bytes = int64_t{200} << 30;  // room for less than one block
  EXPECT_EQ(GpuKvBlocks(b).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(GpuKvBudget, BadFieldsAreInvalidArguments) {
  for (double u : {0.0, -0.5, 1.01}) {
    GpuKvBudget b = H200();
    b.utilization = u;
    EXPECT_EQ(GpuKvBlocks(b).status().code(), absl::StatusCode::kInvalidArgument) << u;
  }
  GpuKvBudget b = H200();
  b.free_bytes = b.total_bytes + 1;
  EXPECT_EQ(GpuKvBlocks(b).status().code(), absl::StatusCode::kInvalidArgument);
  b = H200();
  b.ranks_per_device = 0;
  EXPECT_EQ(GpuKvBlocks(b).status().code(), absl::StatusCode::kInvalidArgument);
  b = H200();
  b.block_bytes = 0;
  EXPECT_EQ(GpuKvBlocks(b).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
