// BeginStep's upload plan (cuda/step_layout.h), on the CPU: only the block
// table's used columns cross the bus, at the table's own row stride.
#include "cuda/step_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace tpserve::cuda {
namespace {

TEST(StepLayout, UsedColumnsAreTheLongestContextInBlocks) {
  EXPECT_EQ(UsedBlockColumns(std::vector<int32_t>{}, 16), 0u);
  EXPECT_EQ(UsedBlockColumns(std::vector<int32_t>{1}, 16), 1u);
  EXPECT_EQ(UsedBlockColumns(std::vector<int32_t>{16}, 16), 1u);
  EXPECT_EQ(UsedBlockColumns(std::vector<int32_t>{17}, 16), 2u);
  EXPECT_EQ(UsedBlockColumns(std::vector<int32_t>{3, 1000, 17}, 16), 63u);
  EXPECT_EQ(UsedBlockColumns(std::vector<int32_t>{7, 7}, 1), 7u);
}

TEST(StepLayout, Batch256OfAThousandTokensUploadsItsColumnsOnly) {
  // 256 decode rows, a 40,960-token model in 16-token blocks: 2,560 columns.
  const size_t S = 256, columns = 40960 / 16;
  const StepLayout layout(S, S, columns);
  const std::vector<int32_t> lens(S, 1000);
  const StepUpload u = PlanStepUpload(layout, S, columns, UsedBlockColumns(lens, 16));
  EXPECT_FALSE(u.contiguous());
  EXPECT_EQ(u.prefix_bytes, layout.tables);
  EXPECT_EQ(u.rows, S);
  EXPECT_EQ(u.row_bytes, 63 * sizeof(int32_t));
  EXPECT_EQ(u.pitch_bytes, columns * sizeof(int32_t));
  EXPECT_EQ(u.bytes(), layout.tables + S * 63 * sizeof(int32_t));
  EXPECT_EQ(S * columns * sizeof(int32_t), 2621440u) << "the whole table the step no longer copies";
  // The rows land where the kernels read them: row s at tables + s * pitch.
  EXPECT_LE(layout.tables + (S - 1) * u.pitch_bytes + u.row_bytes, layout.total);
}

TEST(StepLayout, EveryColumnUsedIsOneContiguousCopy) {
  const StepLayout layout(5, 3, 4);
  const StepUpload u = PlanStepUpload(layout, 3, 4, 4);
  EXPECT_TRUE(u.contiguous());
  EXPECT_EQ(u.bytes(), layout.tables + 3 * 4 * sizeof(int32_t));
  EXPECT_LE(u.bytes(), layout.total);
}

TEST(StepLayout, ReservedLayoutKeepsTheCapacityStride) {
  // A reserved backend lays out the capacity (8 tokens, 8 sequences, 64
  // columns) and a small step (2 sequences of 20 tokens in 16-token blocks)
  // copies 2 columns of its 2 rows at the 64-column stride.
  const StepLayout layout(8, 8, 64);
  const StepUpload u = PlanStepUpload(layout, 2, 64, UsedBlockColumns(std::vector<int32_t>{20, 5}, 16));
  EXPECT_EQ(u.row_bytes, 2 * sizeof(int32_t));
  EXPECT_EQ(u.pitch_bytes, 64 * sizeof(int32_t));
  EXPECT_EQ(u.bytes(), layout.tables + 2 * 2 * sizeof(int32_t));
}

TEST(StepLayout, OffsetsAreAlignedAndOrdered) {
  for (size_t T : {0, 1, 3, 8, 1001}) {
    for (size_t S : {0, 1, 3, 256}) {
      const StepLayout l(T, S, 7);
      for (size_t off : {l.slots, l.ids, l.pos, l.seq, l.logits, l.tables, l.tiles}) EXPECT_EQ(off % 8, 0u);
      EXPECT_LE(l.slots + T * 8, l.ids);
      EXPECT_LE(l.logits + S * 4, l.tables);
      // The prefill tiles follow the whole table (its unused columns too) and fit.
      EXPECT_GE(l.tiles, l.tables + S * 7 * 4);
      EXPECT_EQ(l.max_tiles, PrefillTileCapacity(static_cast<int64_t>(T), static_cast<int64_t>(S), kPrefillTileRows));
      EXPECT_GE(l.total, l.tiles + static_cast<size_t>(l.max_tiles) * sizeof(PrefillTile));
    }
  }
}

}  // namespace
}  // namespace tpserve::cuda
