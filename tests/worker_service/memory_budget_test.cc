// The CPU worker's KV block budget: a share of MemAvailable, split among the
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

}  // namespace
}  // namespace tpserve
