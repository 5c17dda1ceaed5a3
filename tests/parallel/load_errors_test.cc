// Loading parallel layers from bad checkpoints: each failure is a clear error
// naming the tensor (and the tp size or shapes); and a good load puts exactly
// the rank's rows in memory (vocab padding zero, bf16 converted).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "backend/cpu_backend.h"
#include "comm/communicator.h"
#include "model/safetensors.h"
#include "parallel/linear.h"
#include "parallel/replicated_weight.h"
#include "parallel/vocab_parallel.h"
#include "tests/parallel/tp_case.h"
#include "tests/testing/seed.h"

namespace tpserve::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class LoadErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing_util::TestSeed();
    std::string tmpl = (fs::temp_directory_path() / "tpserve-parallel-load-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    tc_ = *CaseByName("llama_f32");  // D 36, F 44, 8 heads / 2 KV heads of 6, V 103
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The case's tensors by name -> shape, to be edited by a test and then written.
  std::map<std::string, std::vector<int64_t>> Tensors() const {
    const ModelConfig& c = tc_.config;
    const int64_t D = c.hidden_size, F = c.intermediate_size, q = c.num_heads * c.head_dim;
    const int64_t kv = c.num_kv_heads * c.head_dim;
    const std::string a = "model.layers.0.self_attn.", m = "model.layers.0.mlp.";
    return {{"model.embed_tokens.weight", {c.vocab_size, D}},
            {"lm_head.weight", {c.vocab_size, D}},
            {a + "q_proj.weight", {q, D}},
            {a + "k_proj.weight", {kv, D}},
            {a + "v_proj.weight", {kv, D}},
            {a + "o_proj.weight", {D, q}},
            {m + "gate_proj.weight", {F, D}},
            {m + "up_proj.weight", {F, D}},
            {m + "down_proj.weight", {D, F}},
            {"model.norm.weight", {D}}};
  }

  std::unique_ptr<Checkpoint> Write(const std::map<std::string, std::vector<int64_t>>& tensors,
                                    DType dtype = DType::kF32) {
    std::mt19937 rng(seed_);
    std::uniform_real_distribution<float> u(-1, 1);
    SafetensorsWriter w;
    for (const auto& [name, shape] : tensors) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = u(rng);
      w.AddF32(name, dtype, shape, v);
    }
    EXPECT_TRUE(w.Write(dir_ / "model.safetensors").ok());
    auto ckpt = Checkpoint::Open(dir_);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    return ckpt.ok() ? *std::move(ckpt) : nullptr;
  }

  uint32_t seed_ = 0;
  fs::path dir_;
  TpCase tc_;
  CpuBackend backend_;
};

TEST_F(LoadErrorsTest, MissingTensorIsNamed) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto tensors = Tensors();
  tensors.erase("model.layers.0.self_attn.k_proj.weight");
  auto ckpt = Write(tensors);
  const ShardContext ctx{*ckpt, tc_.config, 0, 2};
  absl::Status s = QKVParallelLinear::Load(ctx, "model.layers.0.self_attn", backend_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model.layers.0.self_attn.k_proj.weight"));

  tensors = Tensors();
  tensors.erase("lm_head.weight");
  ckpt = Write(tensors);
  const ShardContext ctx2{*ckpt, tc_.config, 0, 1};
  auto emb = VocabParallelEmbedding::Load(ctx2, backend_);
  ASSERT_TRUE(emb.ok()) << emb.status();
  s = ParallelLMHead::Load(ctx2, backend_, *emb).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("lm_head.weight"));
  EXPECT_THAT(s.message(), HasSubstr("tie_word_embeddings"));
}

TEST_F(LoadErrorsTest, WrongShapeNamesExpectedAndActual) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto tensors = Tensors();
  tensors["model.layers.0.mlp.up_proj.weight"] = {44, 35};
  auto ckpt = Write(tensors);
  const ShardContext ctx{*ckpt, tc_.config, 1, 2};
  absl::Status s = MergedColumnParallelLinear::Load(ctx, "model.layers.0.mlp", backend_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.layers.0.mlp.up_proj.weight"));
  EXPECT_THAT(s.message(), HasSubstr("[44, 35]"));
  EXPECT_THAT(s.message(), HasSubstr("[44, 36]"));

  tensors = Tensors();
  tensors["model.norm.weight"] = {37};
  ckpt = Write(tensors);
  const ShardContext ctx2{*ckpt, tc_.config, 0, 1};
  s = ReplicatedWeight::Load(ctx2, "model.norm.weight", backend_).status();
  EXPECT_THAT(s.message(), HasSubstr("model.norm.weight"));
  EXPECT_THAT(s.message(), HasSubstr("[37]"));
}

TEST_F(LoadErrorsTest, NonDivisibleTpIsNamed) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto ckpt = Write(Tensors());
  const ShardContext tp3{*ckpt, tc_.config, 2, 3};  // 8 heads over 3
  absl::Status s = QKVParallelLinear::Load(tp3, "model.layers.0.self_attn", backend_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("q_proj.weight"));
  EXPECT_THAT(s.message(), HasSubstr("tp = 3"));
  s = RowParallelLinear::Load(tp3, "model.layers.0.self_attn.o_proj", backend_).status();
  EXPECT_THAT(s.message(), HasSubstr("o_proj.weight"));
  EXPECT_THAT(s.message(), HasSubstr("tp = 3"));
  const ShardContext tp8{*ckpt, tc_.config, 5, 8};  // F = 44 over 8
  s = RowParallelLinear::Load(tp8, "model.layers.0.mlp.down_proj", backend_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("down_proj.weight"));
  EXPECT_THAT(s.message(), HasSubstr("intermediate_size = 44"));
  EXPECT_THAT(s.message(), HasSubstr("tp = 8"));
}

TEST_F(LoadErrorsTest, BiasMustMatchTheConfig) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto tensors = Tensors();
  tensors["model.layers.0.self_attn.q_proj.bias"] = {48};
  auto ckpt = Write(tensors);
  const ShardContext ctx{*ckpt, tc_.config, 0, 2};  // config: no q/k/v bias
  absl::Status s = QKVParallelLinear::Load(ctx, "model.layers.0.self_attn", backend_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("q_proj.bias"));

  ModelConfig with_bias = tc_.config;
  with_bias.qkv_bias = true;  // k/v biases missing
  const ShardContext ctx2{*ckpt, with_bias, 0, 2};
  s = QKVParallelLinear::Load(ctx2, "model.layers.0.self_attn", backend_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("k_proj.bias"));
}

TEST_F(LoadErrorsTest, WrongLayerForTheTensor) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto ckpt = Write(Tensors());
  const ShardContext ctx{*ckpt, tc_.config, 0, 2};
  absl::Status s = RowParallelLinear::Load(ctx, "model.layers.0.mlp.gate_proj", backend_).status();
  EXPECT_THAT(s.message(), HasSubstr("gate_proj.weight"));
  s = ColumnParallelLinear::Load(ctx, "model.layers.0.mlp.down_proj", backend_).status();
  EXPECT_THAT(s.message(), HasSubstr("down_proj.weight"));
  s = ReplicatedWeight::Load(ctx, "lm_head.weight", backend_).status();
  EXPECT_THAT(s.message(), HasSubstr("lm_head.weight"));
}

TEST_F(LoadErrorsTest, ShardHoldsTheRanksRowsAndZeroPadding) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto ckpt = Write(Tensors(), DType::kBF16);
  const std::vector<float> table = *ckpt->ReadF32("model.embed_tokens.weight");  // [103, 36]
  const int64_t D = 36, vs = 26;  // ceil(103 / 4); rank 3 reads 25 rows and pads 1
  const ShardContext ctx{*ckpt, tc_.config, 3, 4};
  auto emb = VocabParallelEmbedding::Load(ctx, backend_);
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(emb->vocab_start(), 78);
  ASSERT_EQ(emb->weight().ShapeString(), "[26, 36]");
  std::vector<float> got(static_cast<size_t>(vs * D));
  backend_.CopyToHostF32(emb->weight(), got.data());
  for (int64_t r = 0; r < vs; ++r) {
    for (int64_t d = 0; d < D; ++d) {
      const float want = 78 + r < 103 ? table[(78 + r) * D + d] : 0.0f;
      ASSERT_EQ(got[r * D + d], want) << "row " << r << " col " << d;
    }
  }
}

TEST_F(LoadErrorsTest, LmHeadWorkspaceAndOutputSizesAreChecked) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto ckpt = Write(Tensors());
  const ShardContext ctx{*ckpt, tc_.config, 0, 1};
  auto emb = VocabParallelEmbedding::Load(ctx, backend_);
  ASSERT_TRUE(emb.ok());
  auto head = ParallelLMHead::Load(ctx, backend_, *emb);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_FALSE(head->tied());
  auto comm = MakeSoloCommunicator();
  LmHeadWorkspace ws = head->AllocateWorkspace(backend_, 2, 0, 1);
  Buffer hidden = backend_.Allocate(DType::kF32, {3, 36});
  std::vector<float> logits(3 * 103);
  EXPECT_EQ(head->Forward(backend_, *comm, hidden, ws, logits).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> small(2 * 103 - 1);
  EXPECT_EQ(head->Forward(backend_, *comm, hidden.tensor().Rows(0, 2), ws, small).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve::testing
