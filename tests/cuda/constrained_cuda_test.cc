// Constrained output on the CUDA backend with CudaSampler (grammar masks by
// DeviceSampler::MaskRows, cuda/token_mask.cu), through the StepRunner as
// the worker runs it: every output is one the grammar allows (a finished one
// complete, checked again by std::regex for the regexes; a cut one a prefix
// the matcher accepts), and preemption with recompute, and overlapped vs
// lock-step steps, give the same tokens. A byte-level vocabulary stands in
// for a tokenizer (the engine-only build has none). Skips without a GPU; the
// emulated run (label cuda-emu) generates fewer tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "constrained/constraint_compiler.h"
#include "constrained/sequence_constraint.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_model.h"
#include "tests/cuda/test_sizes.h"
#include "tests/testing/constrained_steps.h"
#include "tests/testing/seed.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve {
namespace {

using K = OutputConstraint::Kind;
using testing_util::ConstrainedJob;
using testing_util::ConstrainedOutput;
using testing_util::StepMode;

constexpr int32_t kVocab = 2053;
constexpr int32_t kStop = kVocab - 1;
constexpr int kMaxTokens = cuda_test::kEmulated ? 10 : 48;
constexpr int kBlockSize = 16;

// Ids 0..255 the bytes, then two-byte pieces of JSON-ish text, the last id the stop.
std::shared_ptr<const grammar::Vocabulary> PieceVocabulary() {
  const std::string chars = "abcdefghijklmnopqrstuvwxyz0123456789{}[]\":,- ";
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (size_t i = 0; bytes.size() < static_cast<size_t>(kStop); ++i) {
    bytes.push_back(std::string{chars[i / chars.size() % chars.size()], chars[i % chars.size()]});
  }
  bytes.push_back("");
  std::vector<bool> special(bytes.size(), false);
  special[kStop] = true;
  return *grammar::Vocabulary::Create(bytes, {kStop}, special);
}

struct Case {
  OutputConstraint constraint;
  std::string regex;  // an equivalent std::regex (ECMAScript), or "" to rely on the matcher
};

std::vector<Case> Cases() {
  return {
      {{.kind = K::kRegex, .text = "[a-z]{2,6}(-[0-9]{1,3})?"}, "[a-z]{2,6}(-[0-9]{1,3})?"},
      {{.kind = K::kChoice, .choices = {"red", "green", "blue"}}, "red|green|blue"},
      {{.kind = K::kJsonSchema, .text = R"({"type":"object","properties":{"c":{"enum":["x","y"]},"n":{"type":"integer","minimum":0,"maximum":99}},"required":["c","n"],"additionalProperties":false})"},
       R"(\{"c":"[xy]","n":(0|[1-9][0-9]?)\})"},
      {{.kind = K::kEbnf, .text = "root ::= \"[\" [0-9] (\",\" [0-9])* \"]\"\n"}, R"(\[[0-9](,[0-9])*\])"},
  };
}

class ConstrainedCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
    dir_ = cuda_test::MakeTestModel("tpserve_constrained_cuda", "qwen3",
                                    "--arch qwen3 --hidden 64 --intermediate 128 --layers 2 --heads 4 --kv-heads 2 "
                                    "--head-dim 32 --vocab 2053 --seed 29 --max-pos 1024");
    comm_ = MakeSoloCommunicator();
    backend_ = MakeCudaBackend(0, cuda::KernelSet::kFast);
    ModelOptions options;
    options.max_position = 1024;
    options.max_num_seqs = 8;
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir_, *backend_, *comm_, options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend_, model_->kv_cache_shape(8 * 8, kBlockSize));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::make_unique<KvCache>(*std::move(cache));
    cuda::CudaSampler::Options s;
    s.max_seqs = 8;
    s.vocab_size = kVocab;
    s.sm_count = 132;  // an H200's plan, so the sliced path runs (the emulator has 1 SM)
    absl::StatusOr<std::unique_ptr<cuda::CudaSampler>> sampler =
        cuda::CudaSampler::Create(s, static_cast<cudaStream_t>(backend_->stream()));
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    sampler_ = *std::move(sampler);
    vocab_ = PieceVocabulary();
    compiler_ = std::make_unique<ConstraintCompiler>([this] { return vocab_; });
  }
  void TearDown() override {
    sampler_.reset();
    cache_.reset();
    model_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::vector<ConstrainedOutput> Run(const std::vector<ConstrainedJob>& jobs, StepMode mode, int preempt_every = 0) {
    const testing_util::ConstrainedRun run{.prompt = prompt_, .stop_ids = {kStop}, .max_tokens = kMaxTokens,
                                           .block_size = kBlockSize, .mode = mode, .preempt_every = preempt_every};
    return testing_util::RunConstrained(
        *model_, *cache_, StepRunnerOptions{.sampler = sampler_.get(), .constraints = compiler_.get()}, jobs, run);
  }

  std::vector<ConstrainedJob> Jobs(uint64_t seed) {
    std::vector<ConstrainedJob> jobs;
    const std::vector<Case> cases = Cases();
    for (size_t i = 0; i < 8; ++i) {
      jobs.push_back({std::make_shared<const OutputConstraint>(cases[i % cases.size()].constraint), seed + i,
                      i % 4 == 3 ? 0.0f : 1.0f});
    }
    return jobs;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<cuda::CudaSampler> sampler_;
  std::shared_ptr<const grammar::Vocabulary> vocab_;
  std::unique_ptr<ConstraintCompiler> compiler_;
  std::vector<int32_t> prompt_ = {5, 300, 17, 1200, 9, 77};
};

TEST_F(ConstrainedCudaTest, OutputsAreValid) {
  const uint64_t seed = testing_util::TestSeed();
  const std::vector<Case> cases = Cases();
  const std::vector<ConstrainedJob> jobs = Jobs(seed);
  const std::vector<ConstrainedOutput> outs = Run(jobs, StepMode::kOverlap);
  ASSERT_EQ(outs.size(), jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE("job " + std::to_string(i) + " seed " + std::to_string(seed));
    auto g = compiler_->Compile(*jobs[i].constraint);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(SequenceConstraint::Create(*g, vocab_, *jobs[i].constraint, outs[i].tokens).ok());
    if (!outs[i].stopped) continue;
    std::string text;
    for (size_t k = 0; k + 1 < outs[i].tokens.size(); ++k) text += vocab_->bytes(outs[i].tokens[k]);
    EXPECT_TRUE(std::regex_match(text, std::regex(cases[i % cases.size()].regex))) << text;
  }
}

TEST_F(ConstrainedCudaTest, PreemptionAndLockStepGiveTheSameTokens) {
  const uint64_t seed = testing_util::TestSeed();
  const std::vector<ConstrainedJob> jobs = Jobs(seed + 100);
  const std::vector<ConstrainedOutput> whole = Run(jobs, StepMode::kOverlap);
  const std::vector<ConstrainedOutput> preempted = Run(jobs, StepMode::kOverlap, /*preempt_every=*/4);
  const std::vector<ConstrainedOutput> lock_step = Run(jobs, StepMode::kLockStep);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(preempted[i].tokens, whole[i].tokens) << "job " << i << " seed " << seed;
    EXPECT_EQ(lock_step[i].tokens, whole[i].tokens) << "job " << i << " seed " << seed;
  }
}

}  // namespace
}  // namespace tpserve
