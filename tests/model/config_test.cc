// Tests for model/config.h: real published configs of each family, and every
// rejection (unsupported architecture / rope / activation, missing, inconsistent
// and mistyped fields) with a message that names the field.
#include "model/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::filesystem::path kTestdata = std::filesystem::path(TPSERVE_SOURCE_DIR) / "tests/model/testdata";

std::string ReadFixture(const std::string& name) {
  std::ifstream in(kTestdata / name);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json Fixture(const std::string& name) { return Json::parse(ReadFixture(name)); }

TEST(ConfigTest, Qwen3_0_6B) {
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(ReadFixture("qwen3-0.6b.config.json"));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->arch, Architecture::kQwen3);
  EXPECT_EQ(cfg->model_type, "qwen3");
  EXPECT_EQ(cfg->hidden_size, 1024);
  EXPECT_EQ(cfg->intermediate_size, 3072);
  EXPECT_EQ(cfg->num_layers, 28);
  EXPECT_EQ(cfg->num_heads, 16);
  EXPECT_EQ(cfg->num_kv_heads, 8);
  EXPECT_EQ(cfg->head_dim, 128);  // explicit: not hidden / heads (= 64)
  EXPECT_EQ(cfg->vocab_size, 151936);
  EXPECT_EQ(cfg->max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(cfg->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 1e6);
  EXPECT_EQ(cfg->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_TRUE(cfg->tie_word_embeddings);
  EXPECT_TRUE(cfg->qk_norm);
  EXPECT_FALSE(cfg->qkv_bias);
  EXPECT_EQ(cfg->torch_dtype, "bfloat16");
  EXPECT_EQ(cfg->bos_token_id, 151643);
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(151645));
  EXPECT_EQ(ArchitectureName(cfg->arch), "Qwen3ForCausalLM");
}

TEST(ConfigTest, Llama_3_2_1B) {
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(ReadFixture("llama-3.2-1b.config.json"));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->arch, Architecture::kLlama);
  EXPECT_EQ(cfg->model_type, "llama");
  EXPECT_EQ(cfg->hidden_size, 2048);
  EXPECT_EQ(cfg->intermediate_size, 8192);
  EXPECT_EQ(cfg->num_layers, 16);
  EXPECT_EQ(cfg->num_heads, 32);
  EXPECT_EQ(cfg->num_kv_heads, 8);
  EXPECT_EQ(cfg->head_dim, 64);
  EXPECT_EQ(cfg->vocab_size, 128256);
  EXPECT_EQ(cfg->max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(cfg->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 500000.0);
  EXPECT_EQ(cfg->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(cfg->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(cfg->tie_word_embeddings);
  EXPECT_FALSE(cfg->qk_norm);
  EXPECT_FALSE(cfg->qkv_bias);
  EXPECT_EQ(cfg->bos_token_id, 128000);
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(128001));
}

TEST(ConfigTest, Llama_3_1_8B_InstructUntiedDerivedHeadDimEosList) {
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(ReadFixture("llama-3.1-8b-instruct.config.json"),
                                                     ReadFixture("llama-3.1-8b-instruct.generation_config.json"));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->head_dim, 128);  // 4096 / 32, no head_dim key
  EXPECT_FALSE(cfg->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.factor, 8.0);
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_DOUBLE_EQ(cfg->generation.temperature.value(), 0.6);
  EXPECT_DOUBLE_EQ(cfg->generation.top_p.value(), 0.9);
  EXPECT_FALSE(cfg->generation.top_k.has_value());
  EXPECT_FALSE(cfg->generation.repetition_penalty.has_value());
}

TEST(ConfigTest, Llama_3_8BNullRopeScaling) {
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(ReadFixture("llama-3-8b.config.json"));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(cfg->max_position_embeddings, 8192);
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(128001));
  EXPECT_FALSE(cfg->generation.temperature.has_value());
}

TEST(ConfigTest, Qwen2_5_0_5BHasQkvBiasAndGenerationEosOverrides) {
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(ReadFixture("qwen2.5-0.5b-instruct.config.json"),
                                                     ReadFixture("qwen2.5-0.5b-instruct.generation_config.json"));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->arch, Architecture::kQwen2);
  EXPECT_EQ(cfg->model_type, "qwen2");
  EXPECT_TRUE(cfg->qkv_bias);
  EXPECT_FALSE(cfg->qk_norm);
  EXPECT_EQ(cfg->num_heads, 14);
  EXPECT_EQ(cfg->num_kv_heads, 2);
  EXPECT_EQ(cfg->head_dim, 64);  // 896 / 14
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(151645, 151643));  // generation_config wins
  EXPECT_EQ(cfg->generation.top_k, 20);
  EXPECT_DOUBLE_EQ(cfg->generation.repetition_penalty.value(), 1.1);
}

TEST(ConfigTest, OlderRopeScalingKeyType) {
  Json j = Fixture("llama-3.2-1b.config.json");
  j["rope_scaling"].erase("rope_type");
  j["rope_scaling"]["type"] = "llama3";
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(j.dump());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->rope_scaling.type, RopeScaling::Type::kLlama3);
}

TEST(ConfigTest, AbsentOptionalFieldsTakeTransformersDefaults) {
  Json j = Fixture("llama-3.2-1b.config.json");
  for (const char* key : {"rope_scaling", "head_dim", "num_key_value_heads", "tie_word_embeddings", "hidden_act",
                          "bos_token_id", "eos_token_id", "rope_theta", "torch_dtype"}) {
    j.erase(key);
  }
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(j.dump());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(cfg->head_dim, 64);         // 2048 / 32
  EXPECT_EQ(cfg->num_kv_heads, 32);     // multi-head attention
  EXPECT_FALSE(cfg->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 10000.0);
  EXPECT_FALSE(cfg->bos_token_id.has_value());
  EXPECT_TRUE(cfg->eos_token_ids.empty());
  EXPECT_EQ(cfg->torch_dtype, "");
}

TEST(ConfigTest, LoadFromFolderReadsGenerationConfig) {
  const std::filesystem::path dir =
      std::filesystem::path(TPSERVE_BINARY_DIR) / "config_test_tmp" / "qwen2";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kTestdata / "qwen2.5-0.5b-instruct.config.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(kTestdata / "qwen2.5-0.5b-instruct.generation_config.json",
                             dir / "generation_config.json", std::filesystem::copy_options::overwrite_existing);
  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(151645, 151643));

  // Errors from a folder name the file's path.
  std::ofstream(dir / "generation_config.json") << R"({"top_p": "high"})";
  cfg = LoadModelConfig(dir);
  ASSERT_FALSE(cfg.ok());
  EXPECT_THAT(cfg.status().message(), HasSubstr((dir / "generation_config.json").string()));
  EXPECT_THAT(cfg.status().message(), HasSubstr("top_p"));

  std::filesystem::remove(dir / "generation_config.json");
  cfg = LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(151645));  // config.json's

  const absl::StatusOr<ModelConfig> missing = LoadModelConfig(dir / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("config.json"));
}

// One broken variant of a real config and the words its error must contain.
struct BadCase {
  std::string name;
  std::string fixture;
  std::function<void(Json&)> mutate;
  std::vector<std::string> message_has;
};

class ConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigErrorTest, IsInvalidArgumentNamingTheField) {
  const BadCase& c = GetParam();
  Json j = Fixture(c.fixture);
  c.mutate(j);
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(j.dump());
  ASSERT_FALSE(cfg.ok()) << "accepted: " << j.dump();
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument) << cfg.status();
  EXPECT_THAT(cfg.status().message(), HasSubstr("config.json"));
  for (const std::string& s : c.message_has) EXPECT_THAT(cfg.status().message(), HasSubstr(s));
}

const char kLlama[] = "llama-3.2-1b.config.json";
const char kQwen3[] = "qwen3-0.6b.config.json";
const char kQwen2[] = "qwen2.5-0.5b-instruct.config.json";

INSTANTIATE_TEST_SUITE_P(
    Bad, ConfigErrorTest,
    ::testing::Values(
        BadCase{"UnsupportedArchitecture", kLlama,
                [](Json& j) { j["architectures"] = {"MistralForCausalLM"}; },
                {"architectures", "MistralForCausalLM", "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"}},
        BadCase{"MissingArchitectures", kQwen3, [](Json& j) { j.erase("architectures"); },
                {"architectures", "missing", "Qwen3ForCausalLM"}},
        BadCase{"EmptyArchitectures", kQwen3, [](Json& j) { j["architectures"] = Json::array(); },
                {"architectures", "non-empty list"}},
        BadCase{"ModelTypeMismatch", kQwen3, [](Json& j) { j["model_type"] = "llama"; },
                {"model_type", "qwen3"}},
        BadCase{"RopeYarn", kLlama, [](Json& j) { j["rope_scaling"]["rope_type"] = "yarn"; },
                {"rope_scaling.rope_type", "yarn", "llama3"}},
        BadCase{"RopeDynamicOldKey", kLlama,
                [](Json& j) { j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}}; },
                {"rope_scaling.type", "dynamic", "llama3"}},
        BadCase{"RopeLinear", kQwen3,
                [](Json& j) { j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}}; },
                {"rope_scaling.rope_type", "linear"}},
        BadCase{"RopeNoType", kLlama, [](Json& j) { j["rope_scaling"].erase("rope_type"); },
                {"rope_scaling.rope_type", "missing"}},
        BadCase{"RopeNotObject", kLlama, [](Json& j) { j["rope_scaling"] = "llama3"; },
                {"rope_scaling", "object"}},
        BadCase{"RopeLlama3MissingFactor", kLlama, [](Json& j) { j["rope_scaling"].erase("factor"); },
                {"rope_scaling.factor", "missing"}},
        BadCase{"RopeLlama3MissingOriginal", kLlama,
                [](Json& j) { j["rope_scaling"].erase("original_max_position_embeddings"); },
                {"rope_scaling.original_max_position_embeddings"}},
        BadCase{"RopeLlama3BandsInverted", kLlama, [](Json& j) { j["rope_scaling"]["low_freq_factor"] = 4.0; },
                {"rope_scaling.high_freq_factor", "low_freq_factor"}},
        BadCase{"HiddenActGelu", kLlama, [](Json& j) { j["hidden_act"] = "gelu"; },
                {"hidden_act", "gelu", "silu"}},
        BadCase{"HeadsDoNotDivideHidden", kLlama,
                [](Json& j) {
                  j.erase("head_dim");
                  j["num_attention_heads"] = 24;
                  j["num_key_value_heads"] = 8;
                },
                {"num_attention_heads", "24", "hidden_size", "2048", "head_dim"}},
        BadCase{"KvHeadsDoNotDivideHeads", kQwen3, [](Json& j) { j["num_key_value_heads"] = 6; },
                {"num_key_value_heads", "6", "num_attention_heads", "16"}},
        BadCase{"Qwen3WithoutHeadDim", kQwen3, [](Json& j) { j.erase("head_dim"); },
                {"head_dim", "Qwen3ForCausalLM"}},
        BadCase{"OddHeadDim", kQwen3, [](Json& j) { j["head_dim"] = 63; }, {"head_dim", "even"}},
        BadCase{"ZeroLayers", kLlama, [](Json& j) { j["num_hidden_layers"] = 0; },
                {"num_hidden_layers", "positive"}},
        BadCase{"NegativeHidden", kLlama, [](Json& j) { j["hidden_size"] = -2048; }, {"hidden_size", "positive"}},
        BadCase{"ZeroKvHeads", kLlama, [](Json& j) { j["num_key_value_heads"] = 0; },
                {"num_key_value_heads", "positive"}},
        BadCase{"MissingVocab", kQwen3, [](Json& j) { j.erase("vocab_size"); }, {"vocab_size", "missing"}},
        BadCase{"MissingIntermediate", kQwen2, [](Json& j) { j.erase("intermediate_size"); },
                {"intermediate_size", "missing"}},
        BadCase{"MissingMaxPositions", kQwen2, [](Json& j) { j.erase("max_position_embeddings"); },
                {"max_position_embeddings", "missing"}},
        BadCase{"HiddenAsString", kLlama, [](Json& j) { j["hidden_size"] = "2048"; },
                {"hidden_size", "integer", "string"}},
        BadCase{"LayersAsFloat", kLlama, [](Json& j) { j["num_hidden_layers"] = 16.5; },
                {"num_hidden_layers", "integer"}},
        BadCase{"TieAsString", kLlama, [](Json& j) { j["tie_word_embeddings"] = "yes"; },
                {"tie_word_embeddings", "true or false"}},
        BadCase{"EpsAsString", kQwen3, [](Json& j) { j["rms_norm_eps"] = "1e-6"; }, {"rms_norm_eps", "number"}},
        BadCase{"NegativeEps", kQwen3, [](Json& j) { j["rms_norm_eps"] = -1e-6; }, {"rms_norm_eps", "positive"}},
        BadCase{"ZeroTheta", kQwen3, [](Json& j) { j["rope_theta"] = 0; }, {"rope_theta", "positive"}},
        BadCase{"EosListOfStrings", kLlama, [](Json& j) { j["eos_token_id"] = {"</s>"}; },
                {"eos_token_id", "token id"}},
        BadCase{"EosOutsideVocab", kLlama, [](Json& j) { j["eos_token_id"] = {128001, 999999}; },
                {"eos_token_id", "999999", "vocab_size"}},
        BadCase{"BosAsList", kLlama, [](Json& j) { j["bos_token_id"] = {1, 2}; }, {"bos_token_id"}},
        BadCase{"NegativeBos", kLlama, [](Json& j) { j["bos_token_id"] = -1; }, {"bos_token_id", "negative"}},
        BadCase{"LlamaAttentionBias", kLlama, [](Json& j) { j["attention_bias"] = true; },
                {"attention_bias", "not supported"}},
        BadCase{"MlpBias", kLlama, [](Json& j) { j["mlp_bias"] = true; }, {"mlp_bias", "not supported"}},
        BadCase{"SlidingWindow", kQwen2, [](Json& j) { j["use_sliding_window"] = true; },
                {"use_sliding_window", "not supported"}},
        // Found by tests/model/fuzz_model_config.cc: sizes whose weights overflow int64 were accepted.
        BadCase{"EmbeddingTooLarge", kLlama,
                [](Json& j) {
                  j["hidden_size"] = int64_t{1} << 40;
                  j["vocab_size"] = int64_t{1} << 40;
                },
                {"vocab_size", "embed_tokens", "2^60"}},
        BadCase{"QueryProjectionTooLarge", kQwen3, [](Json& j) { j["head_dim"] = int64_t{1} << 52; },
                {"num_attention_heads", "q_proj", "2^60"}},
        BadCase{"MlpTooLarge", kQwen2, [](Json& j) { j["intermediate_size"] = int64_t{1} << 62; },
                {"intermediate_size", "gate_proj", "2^60"}},
        BadCase{"NotAnObject", kLlama, [](Json& j) { j = Json::array({1, 2}); }, {"JSON object"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(ConfigTest, InvalidJsonNamesTheFile) {
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig("{\"architectures\": [\"LlamaForCausalLM\"],");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cfg.status().message(), HasSubstr("config.json: not valid JSON"));
}

// Found by tests/model/fuzz_model_config.cc: defaults the sampler's float / int32
// fields cannot hold were accepted, and coordinator/request.cc's cast of them was UB.
TEST(ConfigTest, GenerationDefaultsMustFitTheSampler) {
  const std::string config = ReadFixture("llama-3.2-1b.config.json");
  const std::pair<const char*, const char*> cases[] = {
      {R"({"temperature": 1e300})", "temperature"},      {R"({"temperature": -0.5})", "temperature"},
      {R"({"top_k": 99999999999})", "top_k"},            {R"({"top_k": 2147483648})", "top_k"},
      {R"({"repetition_penalty": 1e39})", "repetition_penalty"}};
  for (const auto& [gen, field] : cases) {
    absl::StatusOr<ModelConfig> cfg = ParseModelConfig(config, gen);
    ASSERT_FALSE(cfg.ok()) << gen;
    EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument) << gen;
    EXPECT_THAT(cfg.status().message(), HasSubstr(absl::StrCat("generation_config.json: field \"", field, "\"")));
  }
  absl::StatusOr<ModelConfig> edge =
      ParseModelConfig(config, R"({"temperature": 1e38, "top_k": 2147483647, "repetition_penalty": 3e38})");
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ(edge->generation.top_k, 2147483647);
}

TEST(ConfigTest, BadGenerationConfigNamesThatFile) {
  const std::string config = ReadFixture("llama-3.2-1b.config.json");
  for (const char* gen : {R"({"temperature": "hot"})", R"({"eos_token_id": [1, "x"]})", "[1]", "{",
                          R"({"top_p": 1.5})", R"({"top_k": -3})"}) {
    absl::StatusOr<ModelConfig> cfg = ParseModelConfig(config, gen);
    ASSERT_FALSE(cfg.ok()) << gen;
    EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument) << gen;
    EXPECT_THAT(cfg.status().message(), HasSubstr("generation_config.json")) << gen;
  }
}

}  // namespace
}  // namespace tpserve
