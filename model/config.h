// The model configuration read from a Hugging Face checkpoint folder:
// config.json and (optionally) generation_config.json.
//
// Supported architectures (config.json "architectures"[0]):
//   LlamaForCausalLM  Llama 3, 3.1, 3.2 (rope_scaling.rope_type "llama3" or none)
//   Qwen2ForCausalLM  bias on q/k/v
//   Qwen3ForCausalLM  per-head RMSNorm on q and k, explicit head_dim
// Anything else, or a missing or inconsistent field, is an InvalidArgument error
// that names the field and what is supported.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

enum class Architecture { kLlama, kQwen2, kQwen3 };

std::string_view ArchitectureName(Architecture arch);  // "LlamaForCausalLM", ...

// RoPE frequency scaling. kNone: inv_freq[i] = theta^(-2i/head_dim).
// kLlama3: Llama 3.1 scaling (low/high frequency bands, smooth in between).
struct RopeScaling {
  enum class Type { kNone, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Sampling defaults and stop tokens from generation_config.json (all optional).
struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> repetition_penalty;
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string model_type;              // "llama", "qwen2", "qwen3"
  int64_t hidden_size = 0;             // model width D
  int64_t intermediate_size = 0;       // MLP width F
  int64_t num_layers = 0;              // num_hidden_layers
  int64_t num_heads = 0;               // query heads H
  int64_t num_kv_heads = 0;            // key/value heads Hkv (H % Hkv == 0)
  int64_t head_dim = 0;                // explicit, or hidden_size / num_heads
  int64_t vocab_size = 0;              // V
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;    // LM head reuses embed_tokens.weight
  bool qkv_bias = false;               // Qwen2 (or attention_bias: true)
  bool qk_norm = false;                // Qwen3
  std::string torch_dtype;             // "bfloat16", "float16", "float32" (informational)
  std::optional<int64_t> bos_token_id;
  // End-of-sequence ids: generation_config.json's eos_token_id when present,
  // else config.json's; a single id or a list in either file.
  std::vector<int64_t> eos_token_ids;
  GenerationDefaults generation;
};

// Parses the text of config.json and generation_config.json (empty when absent).
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json,
                                             std::string_view generation_config_json = {});

// Reads <model_dir>/config.json and, if present, <model_dir>/generation_config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& model_dir);

}  // namespace tpserve
