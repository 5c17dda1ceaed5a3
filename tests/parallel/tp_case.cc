#include "tests/parallel/tp_case.h"

#include <random>

#include "base/check.h"
#include "model/safetensors.h"

namespace tpserve::testing {
namespace {

ModelConfig Geometry(Architecture arch, int64_t d, int64_t f, int64_t h, int64_t hkv, int64_t hd, int64_t v) {
  ModelConfig c;
  c.arch = arch;
  c.hidden_size = d;
  c.intermediate_size = f;
  c.num_layers = 1;
  c.num_heads = h;
  c.num_kv_heads = hkv;
  c.head_dim = hd;
  c.vocab_size = v;
  c.max_position_embeddings = 64;
  return c;
}

std::vector<float> Random(std::mt19937& rng, int64_t n, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& x : out) x = u(rng);
  return out;
}

}  // namespace

std::vector<TpCase> AllCases() {
  std::vector<TpCase> cases;
  TpCase llama{"llama_f32", Geometry(Architecture::kLlama, 36, 44, 8, 2, 6, 103), DType::kF32, false};
  cases.push_back(llama);
  TpCase qwen2{"qwen2_bf16", Geometry(Architecture::kQwen2, 28, 20, 4, 4, 10, 61), DType::kBF16, true};
  qwen2.config.qkv_bias = true;
  qwen2.config.tie_word_embeddings = true;
  cases.push_back(qwen2);
  TpCase qwen3{"qwen3_bf16", Geometry(Architecture::kQwen3, 20, 12, 4, 1, 8, 50), DType::kBF16, false};
  qwen3.config.qk_norm = true;
  cases.push_back(qwen3);
  return cases;
}

absl::StatusOr<TpCase> CaseByName(const std::string& name) {
  for (TpCase& c : AllCases()) {
    if (c.name == name) return c;
  }
  return absl::NotFoundError("no test case named " + name);
}

absl::Status WriteCaseFiles(const TpCase& tc, const std::filesystem::path& dir, uint32_t seed) {
  std::mt19937 rng(seed);
  const ModelConfig& c = tc.config;
  const int64_t D = c.hidden_size, F = c.intermediate_size, q = c.num_heads * c.head_dim;
  const int64_t kv = c.num_kv_heads * c.head_dim, V = c.vocab_size;
  SafetensorsWriter w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    // Norm weights around 1, everything else small and centred.
    const bool norm = shape.size() == 1 && name.find("norm") != std::string::npos;
    std::vector<float> values = Random(rng, n, norm ? 0.5f : 0.3f);
    if (norm) {
      for (float& v : values) v += 1.0f;
    }
    w.AddF32(name, tc.checkpoint_dtype, std::move(shape), values);
  };
  add("model.embed_tokens.weight", {V, D});
  const std::string p = "model.layers.0.";
  add(p + "self_attn.q_proj.weight", {q, D});
  add(p + "self_attn.k_proj.weight", {kv, D});
  add(p + "self_attn.v_proj.weight", {kv, D});
  if (c.qkv_bias) {
    add(p + "self_attn.q_proj.bias", {q});
    add(p + "self_attn.k_proj.bias", {kv});
    add(p + "self_attn.v_proj.bias", {kv});
  }
  if (c.qk_norm) {
    add(p + "self_attn.q_norm.weight", {c.head_dim});
    add(p + "self_attn.k_norm.weight", {c.head_dim});
  }
  add(p + "self_attn.o_proj.weight", {D, q});
  if (tc.o_proj_bias) add(p + "self_attn.o_proj.bias", {D});
  add(p + "mlp.gate_proj.weight", {F, D});
  add(p + "mlp.up_proj.weight", {F, D});
  add(p + "mlp.down_proj.weight", {D, F});
  add(p + "input_layernorm.weight", {D});
  add(p + "post_attention_layernorm.weight", {D});
  add("model.norm.weight", {D});
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, D});
  if (absl::Status s = w.Write(dir / "model.safetensors"); !s.ok()) return s;

  SafetensorsWriter inputs;
  inputs.AddF32("x", DType::kF32, {kTokens, D}, Random(rng, kTokens * D, 1.0f));
  return inputs.Write(dir / "inputs.safetensors");
}

std::vector<int32_t> CaseTokenIds(const TpCase& c, uint32_t seed) {
  const int32_t v = static_cast<int32_t>(c.config.vocab_size);
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  std::uniform_int_distribution<int32_t> any(0, v - 1);
  std::vector<int32_t> ids = {0, v - 1, v / 2, any(rng), v - 2, any(rng), 1};
  ids.resize(kTokens);
  return ids;
}

StepBatch OneSequenceStep(std::span<const int32_t> ids, int32_t block_size) {
  const std::vector<int32_t> table{0};
  absl::StatusOr<StepBatch> step =
      StepBatch::Build(std::vector<StepSequence>{{ids, 0, table}}, block_size, StepBatch::StoreKv::kNo);
  TPSERVE_CHECK(step.ok(), "OneSequenceStep: ", step.status().message());
  return *std::move(step);
}

}  // namespace tpserve::testing
