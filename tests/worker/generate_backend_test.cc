// tpserve-generate --backend: a bad name is a clear error; cuda generates on a
// machine with a GPU and says why not on one without.
#include <algorithm>
#include <string>

#include "gtest/gtest.h"
#include "tests/worker/worker_test_util.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

class GenerateBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch llama --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 16 --vocab 300 --dtype bf16 --seed 3");
  }
  static void TearDownTestSuite() { delete dir_; }

  // Runs tpserve-generate with `args`; stdout and stderr together in *out.
  int Generate(const std::string& args, std::string* out) {
    return testing_util::RunCommand(testing_util::GenerateTool() + " --model " + (dir_->path() / "m").string() +
                                        " --prompt-ids 5,6,7 --max-tokens 4 --ignore-eos " + args + " 2>&1",
                                    out);
  }
  static TempDir* dir_;
};
TempDir* GenerateBackendTest::dir_ = nullptr;

TEST_F(GenerateBackendTest, AnUnknownBackendNamesTheChoices) {
  std::string out;
  EXPECT_NE(Generate("--backend tpu", &out), 0);
  EXPECT_NE(out.find("--backend must be cpu or cuda, got \"tpu\""), std::string::npos) << out;
}

TEST_F(GenerateBackendTest, CudaGeneratesOrSaysWhyNot) {
  std::string cpu;
  ASSERT_EQ(Generate("--backend cpu", &cpu), 0) << cpu;
  std::string cuda;
  const int rc = Generate("--backend cuda", &cuda);
  if (rc != 0) {
    // No GPU here (CI) or a build without CUDA: the message says which and what to do.
    EXPECT_TRUE(cuda.find("sees no CUDA device") != std::string::npos ||
                cuda.find("built without CUDA") != std::string::npos)
        << cuda;
    EXPECT_NE(cuda.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << cuda;
    return;
  }
  // A GPU: one line of 4 generated ids (bf16 may pick other tokens than the CPU).
  const size_t at = cuda.find("prompt 0: ");
  ASSERT_NE(at, std::string::npos) << cuda;
  const std::string ids = cuda.substr(at + 10, cuda.find('\n', at) - at - 10);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), ' '), 3) << ids;
}

}  // namespace
}  // namespace tpserve
