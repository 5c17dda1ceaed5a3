// Tensor parallelism with real processes over gloo, through tpserve-generate:
// tp = 1, 2 and 4 give the same greedy tokens for 32 steps and the same logits
// (relative error <= 1e-4) at every step, and the tp = 2 run matches the independent
// float64 numpy forward (tools/reference_forward.py).
//
// The models cover: Llama 3 with llama3 rope scaling, Qwen3 (q/k norm), Qwen2
// (q/k/v bias); vocab not divisible by tp; KV heads < tp; head_dim 64 and 128;
// bf16 and f32 checkpoints; sharded safetensors; tied and untied LM heads.
#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/worker/worker_test_util.h"

namespace tpserve {
namespace {

using testing_util::PythonWithNumpy;
using testing_util::RelativeError;
using testing_util::RunCommand;
using testing_util::TempDir;

struct ModelCase {
  const char* name;
  const char* args;  // tpserve-make-model options
};

// Names the case in test output (gtest would otherwise print the struct's bytes,
// pointers included, into every ctest line).
void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

const ModelCase kModels[] = {
    // head_dim 64, 1 KV head (< tp = 2, 4), vocab 317 (prime), bf16, untied, 3 files.
    {"llama3_bf16_sharded",
     "--arch llama --hidden 256 --intermediate 320 --layers 2 --heads 4 --kv-heads 1 --head-dim 64 "
     "--vocab 317 --dtype bf16 --tie 0 --shards 3 --seed 21 --rope-scaling llama3"},
    // head_dim 128, 2 KV heads (< tp = 4), vocab 1001, f32, tied, one file.
    {"qwen3_f32_tied",
     "--arch qwen3 --hidden 128 --intermediate 224 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 "
     "--vocab 1001 --dtype f32 --tie 1 --seed 22"},
    // Qwen2 with q/k/v bias, head_dim 24, vocab 263, f32, untied, 2 files.
    {"qwen2_bias_f32",
     "--arch qwen2 --hidden 96 --intermediate 160 --layers 2 --heads 4 --kv-heads 4 "
     "--vocab 263 --dtype f32 --tie 0 --shards 2 --seed 23"},
};

const std::vector<std::vector<int32_t>> kPrompts = {{17, 4, 99, 250, 3, 61, 8}, {201, 5}};
constexpr int kSteps = 32;

std::string Join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

struct RunOutput {
  std::vector<std::vector<int32_t>> tokens;             // [prompt][step]
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][step][V]
};

class TensorParallelTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  static void SetUpTestSuite() { dir_ = new TempDir(); }
  static void TearDownTestSuite() { delete dir_; }

  std::filesystem::path Model() {
    const std::filesystem::path dir = dir_->path() / GetParam().name;
    if (!std::filesystem::exists(dir / "config.json")) testing_util::MakeModel(dir, GetParam().args);
    return dir;
  }

  static RunOutput Generate(const std::filesystem::path& model, int tp) {
    const std::filesystem::path out = dir_->path() / (std::string("out_tp") + std::to_string(tp) + ".json");
    std::string prompts;
    for (const auto& p : kPrompts) prompts += (prompts.empty() ? "" : ";") + Join(p);
    const std::string cmd = testing_util::GenerateTool() + " --model " + model.string() + " --tp " +
                            std::to_string(tp) + " --prompt-ids '" + prompts + "' --max-tokens " +
                            std::to_string(kSteps) + " --temperature 0 --ignore-eos --logits --output-json " +
                            out.string() + " --timeout-s 60 >/dev/null";
    RunOutput run;
    EXPECT_EQ(RunCommand(cmd), 0) << cmd;
    nlohmann::json j;
    std::ifstream f(out);
    if (!f) return run;
    f >> j;
    EXPECT_EQ(j["world_size"].get<int>(), tp);
    for (const auto& seq : j["sequences"]) {
      run.tokens.push_back(seq["tokens"].get<std::vector<int32_t>>());
      run.logits.push_back(seq["logits"].get<std::vector<std::vector<float>>>());
    }
    return run;
  }

  static TempDir* dir_;
};
TempDir* TensorParallelTest::dir_ = nullptr;

TEST_P(TensorParallelTest, Tp1Tp2Tp4GiveTheSameTokensAndLogits) {
  const std::filesystem::path model = Model();
  const RunOutput base = Generate(model, 1);
  ASSERT_EQ(base.tokens.size(), kPrompts.size());
  for (int tp : {2, 4}) {
    SCOPED_TRACE(testing::Message() << "tp " << tp);
    const RunOutput run = Generate(model, tp);
    ASSERT_EQ(run.tokens.size(), kPrompts.size());
    for (size_t p = 0; p < kPrompts.size(); ++p) {
      ASSERT_EQ(run.tokens[p].size(), static_cast<size_t>(kSteps));
      EXPECT_EQ(run.tokens[p], base.tokens[p]) << "prompt " << p;
      ASSERT_EQ(run.logits[p].size(), base.logits[p].size());
      for (size_t s = 0; s < run.logits[p].size(); ++s) {
        EXPECT_LE(RelativeError(run.logits[p][s], base.logits[p][s]), 1e-4) << "prompt " << p << " step " << s;
      }
    }
  }
}

TEST_P(TensorParallelTest, GreedyTokensAndFirstLogitsMatchTheFloat64Reference) {
  const std::string python = PythonWithNumpy();
  if (python.empty()) GTEST_SKIP() << "python3 with numpy not found: scripts/install-deps.sh installs python3-numpy";
  const std::filesystem::path model = Model();
  const RunOutput run = Generate(model, 2);
  ASSERT_EQ(run.tokens.size(), kPrompts.size());
  for (size_t p = 0; p < kPrompts.size(); ++p) {
    const std::string cmd = python + " " + TPSERVE_SOURCE_DIR + "/tools/reference_forward.py " + model.string() +
                            " --prompt-ids " + Join(kPrompts[p]) + " --steps " + std::to_string(kSteps);
    std::string out;
    ASSERT_EQ(RunCommand(cmd, &out), 0) << cmd;
    const nlohmann::json ref = nlohmann::json::parse(out);
    EXPECT_EQ(run.tokens[p], ref["tokens"].get<std::vector<int32_t>>()) << "prompt " << p;
    const std::vector<float> ref_logits = ref["logits_last"].get<std::vector<float>>();
    EXPECT_LE(RelativeError(run.logits[p][0], ref_logits), 1e-4) << "prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelTest, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tpserve
