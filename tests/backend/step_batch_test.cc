// StepBatch: the layout of a mixed step, the prefill-group rule, padding a
// decode to a graph bucket, copies, and the errors that name the field.
#include "backend/step_batch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/step_validation.h"

namespace tpserve {
namespace {

using I32 = std::vector<int32_t>;
using I64 = std::vector<int64_t>;

void ExpectInvalid(const absl::Status& st, const std::string& part) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(part), std::string_view::npos) << "'" << part << "' missing from: " << st;
}

// The example of backend/step_batch.h, block size 4.
TEST(StepBatchTest, LaysOutAMixedStep) {
  const I32 a{11, 12, 13}, b{21}, c{31, 32}, d{41};
  const I32 ta{7, 2}, tb{5}, tc{4}, td{1, 3, 6};
  const std::vector<StepSequence> seqs{{a, 3, ta}, {b, 0, tb}, {c, 0, tc}, {d, 9, td}};
  absl::StatusOr<StepBatch> batch = StepBatch::Build(seqs, 4);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const StepBatch::Arrays& x = batch->arrays();
  EXPECT_EQ(x.num_prefill_seqs, 3);
  EXPECT_EQ(x.num_decode_seqs, 1);
  EXPECT_EQ(x.max_blocks_per_seq, 3);
  EXPECT_EQ(x.token_ids, (I32{11, 12, 13, 21, 31, 32, 41}));
  EXPECT_EQ(x.positions, (I32{3, 4, 5, 0, 0, 1, 9}));
  EXPECT_EQ(x.slot_mapping, (I64{31, 8, 9, 20, 16, 17, 25}));
  EXPECT_EQ(x.query_start, (I32{0, 3, 4, 6, 7}));
  EXPECT_EQ(x.seq_lens, (I32{6, 1, 2, 10}));
  EXPECT_EQ(x.block_tables, (I32{7, 2, -1, /**/ 5, -1, -1, /**/ 4, -1, -1, /**/ 1, 3, 6}));
  EXPECT_EQ(x.logits_indices, (I32{2, 3, 5, 6}));

  // The view points into the arrays and is a valid step for the backends.
  const StepMetadata m = batch->view();
  EXPECT_EQ(m.num_seqs(), 4);
  EXPECT_EQ(m.num_tokens(), 7);
  EXPECT_EQ(m.token_ids.data(), x.token_ids.data());
  EXPECT_EQ(m.max_blocks_per_seq, 3);
  EXPECT_TRUE(ValidateStep(m, /*num_blocks=*/8, /*block_size=*/4, /*max_position=*/16).ok());

  // Not stored: the same step with every slot -1.
  absl::StatusOr<StepBatch> unstored = StepBatch::Build(seqs, 4, StepBatch::StoreKv::kNo);
  ASSERT_TRUE(unstored.ok());
  EXPECT_EQ(unstored->arrays().slot_mapping, I64(7, -1));
  EXPECT_EQ(unstored->arrays().positions, x.positions);
}

// A sequence verifying k = 2 proposed tokens (backend/step.h) has its last
// 3 new tokens as logits rows; the others keep one each.
TEST(StepBatchTest, AVerifyingSequenceHasARowPerCheckedToken) {
  const I32 a{11, 12}, v{21, 22, 23}, d{31}, ta{0}, tv{1, 2}, td{3};
  absl::StatusOr<StepBatch> batch =
      StepBatch::Build(std::vector<StepSequence>{{a, 0, ta}, {v, 5, tv, 3}, {d, 2, td}}, 4);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->arrays().num_prefill_seqs, 2);
  EXPECT_EQ(batch->arrays().logits_indices, (I32{1, 2, 3, 4, 5}));
  EXPECT_EQ(batch->view().num_logits_rows(), 5);
  EXPECT_TRUE(ValidateStep(batch->view(), /*num_blocks=*/4, /*block_size=*/4, /*max_position=*/16).ok());
  StepBatch padded;  // no pure decode: no decode graph pads it
  EXPECT_FALSE(padded.AssignPaddedDecode(batch->view(), 8, 4, 4).ok());
}

TEST(StepBatchTest, PrefillGroupEndsAtTheLastMultiTokenSequence) {
  const I32 one{1}, two{1, 2}, table{0, 1};
  auto prefill_of = [&](std::vector<StepSequence> seqs) {
    absl::StatusOr<StepBatch> b = StepBatch::Build(seqs, 16);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? b->arrays().num_prefill_seqs : -1;
  };
  EXPECT_EQ(prefill_of({{one, 0, table}, {one, 5, table}}), 0);  // a one-token prompt counts as a decode
  EXPECT_EQ(prefill_of({{two, 0, table}, {one, 5, table}}), 1);
  EXPECT_EQ(prefill_of({{one, 5, table}, {two, 0, table}, {one, 7, table}}), 2);  // a decode before it joins
  EXPECT_EQ(prefill_of({{one, 5, table}, {one, 3, table}, {two, 0, table}}), 3);
  // No sequences: the empty step.
  absl::StatusOr<StepBatch> empty = StepBatch::Build({}, 16);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->num_seqs(), 0);
  EXPECT_EQ(empty->arrays().query_start, I32{0});
  EXPECT_EQ(empty->arrays().max_blocks_per_seq, 1);
}

TEST(StepBatchTest, PadsADecodeToItsBucketWithHarmlessRows) {
  const I32 a{7}, b{9}, ta{3, 1}, tb{4};
  absl::StatusOr<StepBatch> decode = StepBatch::Build(std::vector<StepSequence>{{a, 4, ta}, {b, 1, tb}}, 4);
  ASSERT_TRUE(decode.ok()) << decode.status();
  StepBatch padded;
  ASSERT_TRUE(padded.AssignPaddedDecode(decode->view(), 4, 6, 4).ok());
  const StepBatch::Arrays& x = padded.arrays();
  EXPECT_EQ(x.num_prefill_seqs, 0);
  EXPECT_EQ(x.num_decode_seqs, 4);
  EXPECT_EQ(x.max_blocks_per_seq, 6);
  EXPECT_EQ(x.token_ids, (I32{7, 9, 0, 0}));
  EXPECT_EQ(x.positions, (I32{4, 1, 0, 0}));
  EXPECT_EQ(x.slot_mapping, (I64{4 * 1 + 0, 4 * 4 + 1, -1, -1}));
  EXPECT_EQ(x.seq_lens, (I32{5, 2, 1, 1}));
  EXPECT_EQ(x.query_start, (I32{0, 1, 2, 3, 4}));
  EXPECT_EQ(x.logits_indices, (I32{0, 1, 2, 3}));
  EXPECT_EQ(x.block_tables, (I32{3, 1, -1, -1, -1, -1,   //
                                 4, -1, -1, -1, -1, -1,  //
                                 0, -1, -1, -1, -1, -1,  //
                                 0, -1, -1, -1, -1, -1}));
  EXPECT_TRUE(ValidateStep(padded.view(), 8, 4, 16).ok());

  // Only the blocks a sequence's context uses are kept.
  const I32 wide{5, 6, 2};
  absl::StatusOr<StepBatch> short_seq = StepBatch::Build(std::vector<StepSequence>{{a, 2, wide}}, 4);
  ASSERT_TRUE(short_seq.ok());
  ASSERT_TRUE(padded.AssignPaddedDecode(short_seq->view(), 1, 4, 4).ok());
  EXPECT_EQ(padded.arrays().block_tables, (I32{5, -1, -1, -1}));

  // All padding: a graph's warm-up step.
  ASSERT_TRUE(padded.AssignPaddedDecode(StepBatch().view(), 2, 3, 4).ok());
  EXPECT_EQ(padded.arrays().slot_mapping, (I64{-1, -1}));
  EXPECT_EQ(padded.arrays().block_tables, (I32{0, -1, -1, 0, -1, -1}));
}

TEST(StepBatchTest, PaddingRefusesWhatItCannotPad) {
  const I32 a{7}, b{9}, ab{7, 8}, ta{3, 1}, tb{4};
  absl::StatusOr<StepBatch> decode = StepBatch::Build(std::vector<StepSequence>{{a, 4, ta}, {b, 1, tb}}, 4);
  absl::StatusOr<StepBatch> prefill = StepBatch::Build(std::vector<StepSequence>{{ab, 3, ta}, {b, 1, tb}}, 4);
  ASSERT_TRUE(decode.ok() && prefill.ok());
  StepBatch padded;
  ExpectInvalid(padded.AssignPaddedDecode(prefill->view(), 4, 6, 4), "1 prefill and 1 decode");
  EXPECT_EQ(padded.num_seqs(), 0);  // a failure leaves the empty step
  ExpectInvalid(padded.AssignPaddedDecode(decode->view(), 1, 6, 4), "padded to 1 decode rows");
  ExpectInvalid(padded.AssignPaddedDecode(decode->view(), 4, 1, 4), "sequence 0 has seq_len 5, which needs 2 blocks");
  EXPECT_EQ(padded.num_seqs(), 0);
  StepMetadata short_tables = decode->view();
  short_tables.block_tables = short_tables.block_tables.first(3);
  ExpectInvalid(padded.AssignPaddedDecode(short_tables, 4, 6, 4), "block-table rows");
}

TEST(StepBatchTest, BuildNamesTheSequenceAndField) {
  const I32 none, three{1, 2, 3}, table{0};
  ExpectInvalid(StepBatch::Build(std::vector<StepSequence>{{three, 0, table}}, 0).status(), "block_size is 0");
  ExpectInvalid(StepBatch::Build(std::vector<StepSequence>{{three, 0, table}, {none, 0, table}}, 4).status(),
                "sequence 1 has no tokens");
  ExpectInvalid(StepBatch::Build(std::vector<StepSequence>{{three, -1, table}}, 4).status(),
                "sequence 0 has num_computed -1");
  ExpectInvalid(StepBatch::Build(std::vector<StepSequence>{{three, 2, table}}, 4).status(),
                "sequence 0 has num_computed 2 + 3 new tokens = 5 but its block_table of 1 blocks");
  ExpectInvalid(StepBatch::Build(std::vector<StepSequence>{{three, 0, table, 4}}, 4).status(),
                "sequence 0 has num_logits 4; it must be in [1, 3]");
  ExpectInvalid(StepBatch::Build(std::vector<StepSequence>{{three, 0, table, 0}}, 4).status(),
                "sequence 0 has num_logits 0");
  StepBatch batch = *StepBatch::Build(std::vector<StepSequence>{{three, 0, table}}, 4);
  EXPECT_FALSE(batch.Assign(std::vector<StepSequence>{{three, 2, table}}, 4).ok());
  EXPECT_EQ(batch.num_seqs(), 0);  // a failure leaves the empty step
  EXPECT_EQ(batch.num_tokens(), 0);
}

TEST(StepBatchTest, CopiesOwnTheirArrays) {
  const I32 a{1, 2, 3}, b{4}, ta{2}, tb{0, 1};
  StepBatch original = *StepBatch::Build(std::vector<StepSequence>{{a, 1, ta}, {b, 6, tb}}, 4);
  StepBatch copy;
  copy.CopyFrom(original.view());
  StepBatch assigned = original;
  original.mutable_arrays().token_ids[0] = 99;
  original.mutable_arrays().logits_indices.assign(2, 0);
  for (const StepBatch* c : {&copy, &assigned}) {
    EXPECT_EQ(c->arrays().token_ids, (I32{1, 2, 3, 4}));
    EXPECT_EQ(c->arrays().logits_indices, (I32{2, 3}));
    EXPECT_EQ(c->arrays().block_tables, (I32{2, -1, 0, 1}));
    EXPECT_EQ(c->view().token_ids.data(), c->arrays().token_ids.data());
    EXPECT_EQ(c->view().num_prefill_seqs, 1);
    EXPECT_EQ(c->view().num_decode_seqs, 1);
    EXPECT_EQ(c->view().max_blocks_per_seq, 2);
  }
  EXPECT_EQ(original.view().token_ids[0], 99);  // the view follows the arrays
}

}  // namespace
}  // namespace tpserve
