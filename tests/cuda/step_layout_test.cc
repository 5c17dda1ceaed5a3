// BeginStep's upload plan (cuda/step_layout.h), on the CPU: the arrays are
// laid out for the step's own tokens and sequences, so the bytes that cross
// the bus follow the step, not the reserved capacity; only the block table's
// used columns cross, at the table's own row stride.
#include "cuda/step_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// What BeginStep copies for a step of T tokens and S sequences whose
// contexts use `used` block-table columns of `stride` (its layout is the
// step's own: StepLayout(T, S, stride)).
size_t UploadedBytes(size_t T, size_t S, size_t stride, size_t used) {
  return PlanStepUpload(StepLayout(T, S, stride), S, stride, used).bytes();
}

TEST(StepLayout, UploadedBytesFollowTheStepNotTheCapacity) {
  // gpu_bench's decode engine: 8,192 tokens and 256 sequences reserved; a
  // 2,048-token model in blocks of 16 (128 columns).
  const size_t stride = 2048 / 16;
  const StepLayout capacity(8192, 256, stride);
  // A batch-1 decode at context 512 (32 columns): its token id, position,
  // slot and sequence index and its logits index (each padded to 8 bytes),
  // then its 32 block ids. The capacity's arrays alone were 8192 x 20 + 256 x 4.
  EXPECT_EQ(UploadedBytes(1, 1, stride, 32), 8 + 8 + 8 + 8 + 8 + 32 * sizeof(int32_t));
  EXPECT_EQ(capacity.tables, 8192 * 20 + 256 * 4u) << "what a step copied before it had its own layout";
  // Each decode sequence more adds its 20 bytes of token arrays, its logits
  // index and its used columns; padding to 8 bytes aside, nothing else.
  for (size_t S : {2, 8, 64, 256}) {
    const size_t arrays = 8 * S + 3 * ((4 * S + 7) / 8 * 8) + (4 * S + 7) / 8 * 8;
    EXPECT_EQ(UploadedBytes(S, S, stride, 32), arrays + S * 32 * sizeof(int32_t)) << "batch " << S;
  }
  // A prefill step of 1,000 tokens of one sequence: 20 bytes a token.
  EXPECT_EQ(UploadedBytes(1000, 1, stride, 63), 8000 + 3 * 4000 + 8 + 63 * sizeof(int32_t));
}

TEST(StepLayout, EveryStepFitsTheCapacitysLayout) {
  // A reserved backend's buffers hold StepLayout(capacity) bytes; every step
  // within the capacity lays out inside them, its table rows included.
  const size_t Tcap = 300, Scap = 40, stride = 17;
  const size_t total = StepLayout(Tcap, Scap, stride).total;
  for (size_t T = 0; T <= Tcap; T += 7) {
    for (size_t S = 0; S <= std::min(T, Scap); S += 3) {
      for (size_t columns : {size_t{1}, stride}) {
        const StepLayout l(T, S, columns);
        EXPECT_LE(l.total, total) << T << " tokens, " << S << " sequences";
        EXPECT_LE(l.tables + S * columns * sizeof(int32_t), l.tiles);
      }
    }
  }
}

// Sequences verifying speculative proposals have more logits rows than
// sequences (backend/step.h): the logits array holds all R, and a reserved
// backend, which allows R <= its max_seqs, still fits every such step.
TEST(StepLayout, MoreLogitsRowsThanSequencesFitTheCapacitysLayout) {
  const size_t Tcap = 300, Scap = 40, stride = 17;
  const size_t total = StepLayout(Tcap, Scap, stride).total;
  for (size_t S = 1; S <= Scap; S += 3) {
    for (size_t R = S; R <= std::min(Tcap, Scap); R += 5) {
      const StepLayout l(std::max<size_t>(R, 2 * S), S, stride, R);
      EXPECT_LE(l.logits + R * 4, l.tables) << S << " sequences, " << R << " rows";
      EXPECT_LE(l.total, total) << S << " sequences, " << R << " rows";
    }
  }
  EXPECT_EQ(StepLayout(9, 3, 5, 0).tables, StepLayout(9, 3, 5, 3).tables);  // R = S: the layout as before
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
