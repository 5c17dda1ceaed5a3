// Parsing config.json / generation_config.json into a ModelConfig.
//
// Every rejection is InvalidArgument and names the file, the field and what is
// supported, so a user can fix the checkpoint or pick another model.
#include "model/config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kSupportedArchitectures =
    "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";

// Names a file in error messages and builds errors about its fields.
struct FileContext {
  std::string name;  // "config.json" or a full path

  absl::Status Error(std::string_view field, std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(name, ": field \"", std::string(field), "\" ", std::string(what)));
  }
  absl::Status TypeError(std::string_view field, std::string_view expected, const Json& got) const {
    return Error(field, absl::StrCat("must be ", std::string(expected), ", got ", got.type_name(), " ", got.dump()));
  }
};

bool Present(const Json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null();
}

// An integer field; nullopt when absent or null.
absl::StatusOr<std::optional<int64_t>> OptionalInt(const Json& obj, std::string_view key,
                                                   const FileContext& file) {
  if (!Present(obj, key)) return std::optional<int64_t>();
  const Json& v = obj.at(std::string(key));
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return file.TypeError(key, "an integer that fits in int64", v);
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v.is_number_integer()) return std::optional<int64_t>(v.get<int64_t>());
  return file.TypeError(key, "an integer", v);
}

absl::StatusOr<int64_t> RequiredPositiveInt(const Json& obj, std::string_view key, const FileContext& file) {
  absl::StatusOr<std::optional<int64_t>> v = OptionalInt(obj, key, file);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return file.Error(key, "is missing; it is required (a positive integer)");
  if (**v <= 0) return file.Error(key, absl::StrCat("must be a positive integer, got ", **v));
  return **v;
}

absl::StatusOr<std::optional<double>> OptionalNumber(const Json& obj, std::string_view key,
                                                     const FileContext& file) {
  if (!Present(obj, key)) return std::optional<double>();
  const Json& v = obj.at(std::string(key));
  if (!v.is_number()) return file.TypeError(key, "a number", v);
  return std::optional<double>(v.get<double>());
}

absl::StatusOr<double> PositiveNumberOr(const Json& obj, std::string_view key, double fallback,
                                        const FileContext& file) {
  absl::StatusOr<std::optional<double>> v = OptionalNumber(obj, key, file);
  if (!v.ok()) return v.status();
  double x = v->value_or(fallback);
  if (!(x > 0) || !std::isfinite(x)) return file.Error(key, absl::StrCat("must be a positive number, got ", x));
  return x;
}

absl::StatusOr<bool> BoolOr(const Json& obj, std::string_view key, bool fallback, const FileContext& file) {
  if (!Present(obj, key)) return fallback;
  const Json& v = obj.at(std::string(key));
  if (!v.is_boolean()) return file.TypeError(key, "true or false", v);
  return v.get<bool>();
}

absl::StatusOr<std::optional<std::string>> OptionalString(const Json& obj, std::string_view key,
                                                          const FileContext& file) {
  if (!Present(obj, key)) return std::optional<std::string>();
  const Json& v = obj.at(std::string(key));
  if (!v.is_string()) return file.TypeError(key, "a string", v);
  return std::optional<std::string>(v.get<std::string>());
}

// A token id field: absent/null, one integer or (when allow_list) a list of integers.
absl::StatusOr<std::optional<std::vector<int64_t>>> TokenIds(const Json& obj, std::string_view key,
                                                             bool allow_list, const FileContext& file) {
  if (!Present(obj, key)) return std::optional<std::vector<int64_t>>();
  const Json& v = obj.at(std::string(key));
  std::vector<int64_t> ids;
  auto take = [&](const Json& x) -> absl::Status {
    if (!x.is_number_integer()) {
      return file.TypeError(key, allow_list ? "a token id or a list of token ids" : "a token id", v);
    }
    int64_t id = x.get<int64_t>();
    if (id < 0) return file.Error(key, absl::StrCat("must not be negative, got ", id));
    ids.push_back(id);
    return absl::OkStatus();
  };
  if (v.is_array() && allow_list) {
    for (const Json& x : v) {
      if (absl::Status s = take(x); !s.ok()) return s;
    }
  } else if (absl::Status s = take(v); !s.ok()) {
    return s;
  }
  return std::optional<std::vector<int64_t>>(std::move(ids));
}

#define TPSERVE_ASSIGN_OR_RETURN(lhs, expr)   \
  do {                                        \
    auto _result = (expr);                    \
    if (!_result.ok()) return _result.status(); \
    lhs = std::move(*_result);                \
  } while (0)

absl::StatusOr<Json> ParseObject(std::string_view text, const FileContext& file) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(file.name, ": not valid JSON"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name, ": must be a JSON object, got ", j.type_name()));
  }
  return j;
}

absl::Status ParseArchitecture(const Json& j, const FileContext& file, ModelConfig& cfg) {
  if (!Present(j, "architectures")) {
    return file.Error("architectures", absl::StrCat("is missing; supported: ", std::string(kSupportedArchitectures)));
  }
  const Json& a = j.at("architectures");
  if (!a.is_array() || a.empty() || !a[0].is_string()) {
    return file.TypeError("architectures", "a non-empty list of strings", a);
  }
  std::string name = a[0].get<std::string>();
  std::string_view expected_type;
  if (name == "LlamaForCausalLM") {
    cfg.arch = Architecture::kLlama;
    expected_type = "llama";
  } else if (name == "Qwen2ForCausalLM") {
    cfg.arch = Architecture::kQwen2;
    expected_type = "qwen2";
  } else if (name == "Qwen3ForCausalLM") {
    cfg.arch = Architecture::kQwen3;
    expected_type = "qwen3";
  } else {
    return file.Error("architectures",
                      absl::StrCat("names unsupported architecture \"", std::string(name),
                                   "\"; supported: ", std::string(kSupportedArchitectures)));
  }
  std::optional<std::string> model_type;
  TPSERVE_ASSIGN_OR_RETURN(model_type, OptionalString(j, "model_type", file));
  if (model_type.has_value() && *model_type != expected_type) {
    return file.Error("model_type", absl::StrCat("is \"", *model_type, "\" but architectures says ",
                                                 std::string(name), " (model_type \"",
                                                 std::string(expected_type), "\")"));
  }
  cfg.model_type = std::string(expected_type);
  return absl::OkStatus();
}

absl::Status ParseRopeScaling(const Json& j, const FileContext& file, ModelConfig& cfg) {
  cfg.rope_scaling = RopeScaling{};
  if (!Present(j, "rope_scaling")) return absl::OkStatus();
  const Json& rs = j.at("rope_scaling");
  if (!rs.is_object()) return file.TypeError("rope_scaling", "an object or null", rs);
  // transformers >= 4.45 writes "rope_type"; older checkpoints wrote "type".
  std::string_view key = Present(rs, "rope_type") ? "rope_type" : "type";
  FileContext sub{absl::StrCat(file.name, ": rope_scaling")};
  std::optional<std::string> type;
  TPSERVE_ASSIGN_OR_RETURN(type, OptionalString(rs, key, sub));
  if (!type.has_value()) {
    return file.Error("rope_scaling.rope_type", "is missing; supported: \"llama3\" (or rope_scaling: null)");
  }
  if (*type == "default") return absl::OkStatus();
  if (*type != "llama3") {
    return file.Error(absl::StrCat("rope_scaling.", std::string(key)),
                      absl::StrCat("is \"", *type,
                                   "\", which is not supported; supported: \"llama3\", \"default\" "
                                   "or rope_scaling: null"));
  }
  RopeScaling out;
  out.type = RopeScaling::Type::kLlama3;
  auto need = [&](std::string_view field, double& dst) -> absl::Status {
    std::optional<double> v;
    TPSERVE_ASSIGN_OR_RETURN(v, OptionalNumber(rs, field, sub));
    if (!v.has_value()) {
      return file.Error(absl::StrCat("rope_scaling.", std::string(field)), "is missing; llama3 rope scaling requires it");
    }
    if (!(*v > 0) || !std::isfinite(*v)) {
      return file.Error(absl::StrCat("rope_scaling.", std::string(field)), absl::StrCat("must be positive, got ", *v));
    }
    dst = *v;
    return absl::OkStatus();
  };
  if (absl::Status s = need("factor", out.factor); !s.ok()) return s;
  if (absl::Status s = need("low_freq_factor", out.low_freq_factor); !s.ok()) return s;
  if (absl::Status s = need("high_freq_factor", out.high_freq_factor); !s.ok()) return s;
  if (!(out.high_freq_factor > out.low_freq_factor)) {
    return file.Error("rope_scaling.high_freq_factor",
                      absl::StrCat("(", out.high_freq_factor, ") must be greater than low_freq_factor (",
                                   out.low_freq_factor, ")"));
  }
  std::optional<int64_t> orig;
  TPSERVE_ASSIGN_OR_RETURN(orig, OptionalInt(rs, "original_max_position_embeddings", sub));
  if (!orig.has_value() || *orig <= 0) {
    return file.Error("rope_scaling.original_max_position_embeddings",
                      "must be a positive integer; llama3 rope scaling requires it");
  }
  out.original_max_position_embeddings = *orig;
  cfg.rope_scaling = out;
  return absl::OkStatus();
}

// The largest weight, in elements: its size in bytes (at most 8 per element) must fit
// in int64, which the loader counts in (e.g. parallel/sharding.cc's ExpectedShape
// multiplies num_heads * head_dim). No real model comes near.
constexpr int64_t kMaxWeightElements = int64_t{1} << 60;

// Refuses sizes whose weights the model code could not count without overflow.
absl::Status CheckWeightSizes(const ModelConfig& cfg, const FileContext& file) {
  struct Weight {
    std::string_view field;  // the field to blame
    std::string_view shape;  // the weight, as the error names it
    int64_t rows_a, rows_b, cols;
  };
  const Weight weights[] = {
      {"vocab_size", "embed_tokens [vocab_size, hidden_size]", cfg.vocab_size, 1, cfg.hidden_size},
      {"num_attention_heads", "q_proj [num_attention_heads * head_dim, hidden_size]", cfg.num_heads, cfg.head_dim,
       cfg.hidden_size},
      {"intermediate_size", "gate_proj [intermediate_size, hidden_size]", cfg.intermediate_size, 1,
       cfg.hidden_size},
  };
  for (const Weight& w : weights) {
    int64_t n = 0;
    if (__builtin_mul_overflow(w.rows_a, w.rows_b, &n) || __builtin_mul_overflow(n, w.cols, &n) ||
        n > kMaxWeightElements) {
      return file.Error(w.field, absl::StrCat("makes ", std::string(w.shape),
                                              " larger than 2^60 elements; these sizes are not a real model"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseShapes(const Json& j, const FileContext& file, ModelConfig& cfg) {
  TPSERVE_ASSIGN_OR_RETURN(cfg.hidden_size, RequiredPositiveInt(j, "hidden_size", file));
  TPSERVE_ASSIGN_OR_RETURN(cfg.intermediate_size, RequiredPositiveInt(j, "intermediate_size", file));
  TPSERVE_ASSIGN_OR_RETURN(cfg.num_layers, RequiredPositiveInt(j, "num_hidden_layers", file));
  TPSERVE_ASSIGN_OR_RETURN(cfg.num_heads, RequiredPositiveInt(j, "num_attention_heads", file));
  TPSERVE_ASSIGN_OR_RETURN(cfg.vocab_size, RequiredPositiveInt(j, "vocab_size", file));
  TPSERVE_ASSIGN_OR_RETURN(cfg.max_position_embeddings,
                           RequiredPositiveInt(j, "max_position_embeddings", file));

  // Absent num_key_value_heads means multi-head attention (as in transformers).
  if (Present(j, "num_key_value_heads")) {
    TPSERVE_ASSIGN_OR_RETURN(cfg.num_kv_heads, RequiredPositiveInt(j, "num_key_value_heads", file));
  } else {
    cfg.num_kv_heads = cfg.num_heads;
  }
  if (cfg.num_heads % cfg.num_kv_heads != 0) {
    return file.Error("num_key_value_heads",
                      absl::StrCat("(", cfg.num_kv_heads, ") must divide num_attention_heads (",
                                   cfg.num_heads, ")"));
  }

  if (Present(j, "head_dim")) {
    TPSERVE_ASSIGN_OR_RETURN(cfg.head_dim, RequiredPositiveInt(j, "head_dim", file));
  } else if (cfg.arch == Architecture::kQwen3) {
    return file.Error("head_dim", "is missing; Qwen3ForCausalLM requires an explicit head_dim");
  } else {
    if (cfg.hidden_size % cfg.num_heads != 0) {
      return file.Error("num_attention_heads",
                        absl::StrCat("(", cfg.num_heads, ") must divide hidden_size (", cfg.hidden_size,
                                     ") when head_dim is absent; give head_dim explicitly otherwise"));
    }
    cfg.head_dim = cfg.hidden_size / cfg.num_heads;
  }
  if (cfg.head_dim % 2 != 0) {
    return file.Error("head_dim", absl::StrCat("(", cfg.head_dim, ") must be even for rotary embeddings"));
  }
  return CheckWeightSizes(cfg, file);
}

absl::Status ParseFeatures(const Json& j, const FileContext& file, ModelConfig& cfg) {
  std::optional<std::string> act;
  TPSERVE_ASSIGN_OR_RETURN(act, OptionalString(j, "hidden_act", file));
  if (act.has_value() && *act != "silu") {
    return file.Error("hidden_act", absl::StrCat("is \"", *act, "\"; only \"silu\" is supported"));
  }
  TPSERVE_ASSIGN_OR_RETURN(cfg.rms_norm_eps, PositiveNumberOr(j, "rms_norm_eps", 1e-6, file));
  TPSERVE_ASSIGN_OR_RETURN(cfg.rope_theta, PositiveNumberOr(j, "rope_theta", 10000.0, file));
  TPSERVE_ASSIGN_OR_RETURN(cfg.tie_word_embeddings, BoolOr(j, "tie_word_embeddings", false, file));

  bool attention_bias = false;
  TPSERVE_ASSIGN_OR_RETURN(attention_bias, BoolOr(j, "attention_bias", false, file));
  bool mlp_bias = false;
  TPSERVE_ASSIGN_OR_RETURN(mlp_bias, BoolOr(j, "mlp_bias", false, file));
  if (mlp_bias) return file.Error("mlp_bias", "is true; MLP biases are not supported");
  switch (cfg.arch) {
    case Architecture::kQwen2:
      // Qwen2 always has q/k/v biases (and none on o_proj); attention_bias is not read.
      cfg.qkv_bias = true;
      cfg.qk_norm = false;
      break;
    case Architecture::kLlama:
    case Architecture::kQwen3:
      // attention_bias here also puts a bias on o_proj, which the model does not have.
      if (attention_bias) {
        return file.Error("attention_bias",
                          absl::StrCat("is true; ", std::string(ArchitectureName(cfg.arch)),
                                       " with attention biases is not supported (only Qwen2 q/k/v biases)"));
      }
      cfg.qkv_bias = false;
      cfg.qk_norm = cfg.arch == Architecture::kQwen3;
      break;
  }
  bool sliding = false;
  TPSERVE_ASSIGN_OR_RETURN(sliding, BoolOr(j, "use_sliding_window", false, file));
  if (sliding) return file.Error("use_sliding_window", "is true; sliding-window attention is not supported");

  std::optional<std::string> dtype;
  TPSERVE_ASSIGN_OR_RETURN(dtype, OptionalString(j, "torch_dtype", file));
  if (!dtype.has_value()) TPSERVE_ASSIGN_OR_RETURN(dtype, OptionalString(j, "dtype", file));
  cfg.torch_dtype = dtype.value_or("");
  return absl::OkStatus();
}

absl::Status CheckTokenId(int64_t id, std::string_view field, const FileContext& file, const ModelConfig& cfg) {
  if (id >= cfg.vocab_size) {
    return file.Error(field, absl::StrCat("(", id, ") is outside the vocabulary (vocab_size ", cfg.vocab_size, ")"));
  }
  return absl::OkStatus();
}

absl::Status ParseSpecialTokens(const Json& j, const FileContext& file, const Json* gen,
                                const FileContext& gen_file, ModelConfig& cfg) {
  std::optional<std::vector<int64_t>> bos;
  TPSERVE_ASSIGN_OR_RETURN(bos, TokenIds(j, "bos_token_id", /*allow_list=*/false, file));
  if (bos.has_value()) {
    if (absl::Status s = CheckTokenId(bos->front(), "bos_token_id", file, cfg); !s.ok()) return s;
    cfg.bos_token_id = bos->front();
  }
  std::optional<std::vector<int64_t>> eos;
  TPSERVE_ASSIGN_OR_RETURN(eos, TokenIds(j, "eos_token_id", /*allow_list=*/true, file));
  const FileContext* eos_file = &file;
  if (gen != nullptr) {
    std::optional<std::vector<int64_t>> gen_eos;
    TPSERVE_ASSIGN_OR_RETURN(gen_eos, TokenIds(*gen, "eos_token_id", /*allow_list=*/true, gen_file));
    if (gen_eos.has_value()) {
      eos = std::move(gen_eos);
      eos_file = &gen_file;
    }
  }
  if (eos.has_value()) {
    for (int64_t id : *eos) {
      if (absl::Status s = CheckTokenId(id, "eos_token_id", *eos_file, cfg); !s.ok()) return s;
    }
    cfg.eos_token_ids = std::move(*eos);
  }
  return absl::OkStatus();
}

absl::Status ParseGeneration(const Json& gen, const FileContext& file, ModelConfig& cfg) {
  GenerationDefaults& g = cfg.generation;
  TPSERVE_ASSIGN_OR_RETURN(g.temperature, OptionalNumber(gen, "temperature", file));
  TPSERVE_ASSIGN_OR_RETURN(g.top_p, OptionalNumber(gen, "top_p", file));
  TPSERVE_ASSIGN_OR_RETURN(g.top_k, OptionalInt(gen, "top_k", file));
  TPSERVE_ASSIGN_OR_RETURN(g.repetition_penalty, OptionalNumber(gen, "repetition_penalty", file));
  // The sampler keeps these as float and int32 (sampling/sampler.h): larger values
  // would not convert (coordinator/request.cc casts them).
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  if (g.temperature.has_value() && !(*g.temperature >= 0 && *g.temperature <= kFloatMax)) {
    return file.Error("temperature", absl::StrCat("must be a finite number >= 0 (at most 3.4e38), got ",
                                                  *g.temperature));
  }
  if (g.top_p.has_value() && !(*g.top_p > 0 && *g.top_p <= 1)) {
    return file.Error("top_p", absl::StrCat("must be in (0, 1], got ", *g.top_p));
  }
  if (g.top_k.has_value() && !(*g.top_k >= 0 && *g.top_k <= std::numeric_limits<int32_t>::max())) {
    return file.Error("top_k", absl::StrCat("must be in [0, 2^31 - 1], got ", *g.top_k));
  }
  if (g.repetition_penalty.has_value() && !(*g.repetition_penalty > 0 && *g.repetition_penalty <= kFloatMax)) {
    return file.Error("repetition_penalty", absl::StrCat("must be a finite positive number (at most 3.4e38), got ",
                                                         *g.repetition_penalty));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> Parse(std::string_view config_json, std::string_view generation_config_json,
                                  const FileContext& file, const FileContext& gen_file) {
  Json j;
  TPSERVE_ASSIGN_OR_RETURN(j, ParseObject(config_json, file));
  ModelConfig cfg;
  if (absl::Status s = ParseArchitecture(j, file, cfg); !s.ok()) return s;
  if (absl::Status s = ParseShapes(j, file, cfg); !s.ok()) return s;
  if (absl::Status s = ParseFeatures(j, file, cfg); !s.ok()) return s;
  if (absl::Status s = ParseRopeScaling(j, file, cfg); !s.ok()) return s;

  std::optional<Json> gen;
  if (!generation_config_json.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(gen, ParseObject(generation_config_json, gen_file));
    if (absl::Status s = ParseGeneration(*gen, gen_file, cfg); !s.ok()) return s;
  }
  if (absl::Status s = ParseSpecialTokens(j, file, gen ? &*gen : nullptr, gen_file, cfg); !s.ok()) return s;
  return cfg;
}

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path.string()));
  return ss.str();
}

#undef TPSERVE_ASSIGN_OR_RETURN

}  // namespace

std::string_view ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "LlamaForCausalLM";
    case Architecture::kQwen2:
      return "Qwen2ForCausalLM";
    case Architecture::kQwen3:
      return "Qwen3ForCausalLM";
  }
  return "unknown";
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json,
                                             std::string_view generation_config_json) {
  return Parse(config_json, generation_config_json, FileContext{"config.json"},
               FileContext{"generation_config.json"});
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& model_dir) {
  const std::filesystem::path config_path = model_dir / "config.json";
  absl::StatusOr<std::string> config = ReadFile(config_path);
  if (!config.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read ", config_path.string(),
        "; give the folder of a Hugging Face checkpoint (config.json, *.safetensors, tokenizer.json)"));
  }
  const std::filesystem::path gen_path = model_dir / "generation_config.json";
  std::string gen;
  std::error_code ec;
  if (std::filesystem::exists(gen_path, ec)) {
    absl::StatusOr<std::string> g = ReadFile(gen_path);
    if (!g.ok()) return g.status();
    gen = std::move(*g);
    // An empty generation_config.json would otherwise read as "absent".
    if (gen.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(gen_path.string(), ": file is empty; expected a JSON object"));
    }
  }
  return Parse(*config, gen, FileContext{config_path.string()}, FileContext{gen_path.string()});
}

}  // namespace tpserve
