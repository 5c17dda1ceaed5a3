// BeginStep rejects every way a caller's step can point outside the KV cache or
// contradict itself, with an InvalidArgument that names the sequence and the
// value; and it keeps its own copy of the step.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "tests/backend/cpu_test_util.h"

namespace tpserve {
namespace {

constexpr int64_t kNumBlocks = 10;
constexpr int32_t kBlockSize = 4;
constexpr int64_t kMaxPosition = 64;

// Two prefills (one after 3 cached tokens), then two decodes; 8 new tokens:
//   token_ids      5  6  7  8 | 9 10 | 11 | 12
//   positions      3  4  5  6 | 0  1 |  8 |  0
//   slot_mapping  11 20 21 22 | 0  1 | 16 | 28
//   block_tables  [2 5 -1] [0 -1 -1] [1 3 4] [7 -1 -1], logits 3 5 6 7
StepBatch ValidStep() {
  const std::vector<int32_t> t0{5, 6, 7, 8}, t1{9, 10}, t2{11}, t3{12};
  const std::vector<int32_t> b0{2, 5}, b1{0}, b2{1, 3, 4}, b3{7};
  const std::vector<StepSequence> seqs{{t0, 3, b0}, {t1, 0, b1}, {t2, 8, b2}, {t3, 0, b3}};
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, kBlockSize);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? *std::move(step) : StepBatch();
}

struct BadCase {
  std::string name;
  std::function<void(StepBatch::Arrays&)> mutate;
  std::vector<std::string> message_parts;  // each must appear in the error
};

TEST(CpuStepValidationTest, AcceptsSeveralLogitsRowsPerSequence) {
  auto backend = MakeCpuBackend();
  StepBatch h = ValidStep();
  h.mutable_arrays().logits_indices = {0, 1, 2, 3, 4, 5, 6, 7};  // every row, as a verifying sequence has
  EXPECT_TRUE(backend->BeginStep(h.view(), kNumBlocks, kBlockSize, kMaxPosition).ok());
}

TEST(CpuStepValidationTest, AcceptsAValidMixedStep) {
  auto backend = MakeCpuBackend();
  StepBatch h = ValidStep();
  EXPECT_TRUE(backend->BeginStep(h.view(), kNumBlocks, kBlockSize, kMaxPosition).ok());
  h.mutable_arrays().block_tables[4] = 99;  // unused part of sequence 1's row: not checked
  h.mutable_arrays().slot_mapping[2] = -1;  // padding
  EXPECT_TRUE(backend->BeginStep(h.view(), kNumBlocks, kBlockSize, kMaxPosition).ok());
  const StepBatch empty;
  EXPECT_TRUE(backend->BeginStep(empty.view(), kNumBlocks, kBlockSize, kMaxPosition).ok());
}

TEST(CpuStepValidationTest, RejectsBadStepsNamingSequenceAndValue) {
  const std::vector<BadCase> cases = {
      {"block id past num_blocks", [](auto& h) { h.block_tables[8] = 10; },
       {"sequence 2", "block id 10", "[0, 10)"}},
      {"negative block id in use", [](auto& h) { h.block_tables[1] = -1; },
       {"sequence 0", "block id -1"}},
      {"more blocks than the table has", [](auto& h) {
         h.seq_lens[2] = 13;
         h.positions[6] = 12;
       }, {"sequence 2", "seq_lens = 13", "max_blocks_per_seq = 3"}},
      {"slot past the cache", [](auto& h) { h.slot_mapping[5] = 40; },
       {"sequence 1", "slot 40", "[0, 40)"}},
      {"negative slot other than -1", [](auto& h) { h.slot_mapping[0] = -2; },
       {"sequence 0", "slot -2"}},
      {"position at max_position", [](auto& h) {
         h.seq_lens[2] = 65;
         h.positions[6] = 64;
         h.block_tables = std::vector<int32_t>(4 * 17, 1);
         h.max_blocks_per_seq = 17;
       }, {"sequence 2", "position 64", "[0, 64)"}},
      {"negative position", [](auto& h) { h.positions[4] = -1; },
       {"sequence 1", "position -1"}},
      {"position that contradicts seq_lens", [](auto& h) { h.positions[1] = 9; },
       {"sequence 0", "position 9", "must be 4"}},
      {"query_start not monotonic", [](auto& h) { h.query_start = {0, 4, 3, 7, 8}; },
       {"sequence 1", "query_start[2] = 3"}},
      {"query_start not ending at T", [](auto& h) { h.query_start[4] = 9; },
       {"query_start[4] = 9", "8"}},
      {"query_start not starting at 0", [](auto& h) { h.query_start[0] = 1; },
       {"query_start[0] = 1"}},
      {"seq_lens below the new tokens", [](auto& h) { h.seq_lens[0] = 3; },
       {"sequence 0", "seq_lens = 3", "4 new tokens"}},
      {"logits index in another sequence", [](auto& h) { h.logits_indices[1] = 6; },
       {"sequence 1", "logits_indices = 6", "[4, 6)"}},
      {"decode sequence with two new tokens", [](auto& h) {
         h.num_prefill_seqs = 1;
         h.num_decode_seqs = 3;
       }, {"sequence 1 (decode)", "2 new tokens"}},
      {"positions too short", [](auto& h) { h.positions.pop_back(); },
       {"positions has 7 entries", "8"}},
      {"block table too short", [](auto& h) { h.block_tables.pop_back(); },
       {"block_tables has 11 entries", "12"}},
      {"logits_indices too short", [](auto& h) { h.logits_indices.pop_back(); },
       {"logits_indices has 3 entries"}},
      {"logits rows not increasing", [](auto& h) { h.logits_indices = {3, 1, 2, 5, 6, 7}; },
       {"sequence 0", "entry 1 = 1", "must increase"}},
      {"logits row after the last sequence", [](auto& h) { h.logits_indices = {3, 5, 6, 7, 8}; },
       {"entry 4 = 8", "belongs to no sequence"}},
      {"a sequence without a logits row", [](auto& h) { h.logits_indices = {2, 3, 6, 7}; },
       {"sequence 1", "logits_indices = 6", "[4, 6)"}},
  };
  auto backend = MakeCpuBackend();
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    StepBatch h = ValidStep();
    c.mutate(h.mutable_arrays());
    absl::Status status = backend->BeginStep(h.view(), kNumBlocks, kBlockSize, kMaxPosition);
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    for (const std::string& part : c.message_parts) {
      EXPECT_NE(status.message().find(part), std::string_view::npos)
          << "'" << part << "' missing from: " << status.message();
    }
  }
}

TEST(CpuStepValidationTest, RejectsBadGeometry) {
  auto backend = MakeCpuBackend();
  const StepBatch h = ValidStep();
  EXPECT_EQ(backend->BeginStep(h.view(), kNumBlocks, 0, kMaxPosition).code(),
            absl::StatusCode::kInvalidArgument);
  // 5 blocks: sequence 2's block 5 is out of range, and so is sequence 0's.
  absl::Status s = backend->BeginStep(h.view(), 5, kBlockSize, kMaxPosition);
  EXPECT_NE(s.message().find("sequence 0 (prefill): block_tables entry 1 is block id 5"),
            std::string_view::npos) << s;
}

TEST(CpuStepValidationTest, KeepsItsOwnCopyOfTheStep) {
  auto backend = MakeCpuBackend();
  const int64_t D = 3;
  Buffer x = backend->Allocate(DType::kF32, {8, D});
  std::vector<float> rows(8 * D);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  backend->CopyFromHost(rows.data(), DType::kF32, x);
  {
    StepBatch h = ValidStep();
    ASSERT_TRUE(backend->BeginStep(h.view(), kNumBlocks, kBlockSize, kMaxPosition).ok());
    h.mutable_arrays().logits_indices.assign(4, 0);  // the caller reuses (then frees) its arrays
  }
  Buffer out = backend->Allocate(DType::kF32, {4, D});
  backend->GatherRows(x, out);
  std::vector<float> got(4 * D);
  backend->CopyToHostF32(out, got.data());
  const int rows_taken[] = {3, 5, 6, 7};
  for (int s = 0; s < 4; ++s) {
    for (int d = 0; d < D; ++d) EXPECT_EQ(got[s * D + d], rows[rows_taken[s] * D + d]);
  }
}

TEST(CpuStepValidationTest, AFailedBeginStepLeavesNoCurrentStep) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  auto backend = MakeCpuBackend();
  StepBatch h = ValidStep();
  ASSERT_TRUE(backend->BeginStep(h.view(), kNumBlocks, kBlockSize, kMaxPosition).ok());
  h.mutable_arrays().slot_mapping[0] = 1000;
  ASSERT_FALSE(backend->BeginStep(h.view(), kNumBlocks, kBlockSize, kMaxPosition).ok());
  Buffer x = backend->Allocate(DType::kF32, {8, 2});
  Buffer out = backend->Allocate(DType::kF32, {4, 2});
  EXPECT_DEATH(backend->GatherRows(x, out), "no current step");
}

}  // namespace
}  // namespace tpserve
