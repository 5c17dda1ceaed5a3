// The Profile forward: as large as the model's options allow, and a valid step
// for the backend (block tables, slots, positions), at several sizes.
#include "worker_service/profile_step.h"

#include <memory>

#include "backend/cpu_backend.h"
#include "comm/communicator.h"
#include "gtest/gtest.h"
#include "tests/worker/worker_test_util.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

class ProfileStepTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch llama --hidden 48 --intermediate 80 --layers 2 --heads 6 --kv-heads 2 "
                            "--head-dim 8 --vocab 263 --dtype f32 --tie 1 --max-pos 64 --seed 5");
  }
  static void TearDownTestSuite() { delete dir_; }

  std::unique_ptr<Model> Load(int64_t max_tokens, int64_t max_seqs, int64_t max_position = 0) {
    ModelOptions options;
    options.max_num_tokens = max_tokens;
    options.max_num_seqs = max_seqs;
    options.max_position = max_position;
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir_->path() / "m", *backend_, *comm_, options);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }

  std::unique_ptr<Backend> backend_ = MakeCpuBackend(1);
  std::unique_ptr<Communicator> comm_ = MakeSoloCommunicator();
  static TempDir* dir_;
};
TempDir* ProfileStepTest::dir_ = nullptr;

TEST_F(ProfileStepTest, FillsTheTokenAndSequenceBudgets) {
  std::unique_ptr<Model> model = Load(/*max_tokens=*/61, /*max_seqs=*/7);
  ASSERT_NE(model, nullptr);
  const ProfileStepShape shape = ProfileShape(*model);
  EXPECT_EQ(shape.num_seqs, 7);
  EXPECT_EQ(shape.num_tokens, 61);
  for (int32_t block_size : {1, 3, 16}) {
    absl::Status st = RunProfileStep(*model, *backend_, block_size);
    EXPECT_TRUE(st.ok()) << "block_size " << block_size << ": " << st;
  }
}

TEST_F(ProfileStepTest, MoreSequencesThanTokensGivesOneTokenEach) {
  std::unique_ptr<Model> model = Load(/*max_tokens=*/5, /*max_seqs=*/256);
  ASSERT_NE(model, nullptr);
  const ProfileStepShape shape = ProfileShape(*model);
  EXPECT_EQ(shape.num_seqs, 5);
  EXPECT_EQ(shape.num_tokens, 5);
  EXPECT_TRUE(RunProfileStep(*model, *backend_, 16).ok());
}

TEST_F(ProfileStepTest, SequencesStayWithinTheMaximumLength) {
  // One sequence may hold at most 20 positions, so 2 sequences take 40 of the 100 tokens.
  std::unique_ptr<Model> model = Load(/*max_tokens=*/100, /*max_seqs=*/2, /*max_position=*/20);
  ASSERT_NE(model, nullptr);
  const ProfileStepShape shape = ProfileShape(*model);
  EXPECT_EQ(shape.num_seqs, 2);
  EXPECT_EQ(shape.num_tokens, 40);
  absl::Status st = RunProfileStep(*model, *backend_, 7);
  EXPECT_TRUE(st.ok()) << st;
}

TEST_F(ProfileStepTest, ABadBlockSizeIsAnError) {
  std::unique_ptr<Model> model = Load(8, 2);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(RunProfileStep(*model, *backend_, 0).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
