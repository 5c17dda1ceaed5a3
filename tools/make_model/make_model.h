// tpserve-make-model: writes a random-weight model in exactly the Hugging Face
// layout (config.json, generation_config.json, tokenizer.json,
// tokenizer_config.json, model.safetensors or model-0000i-of-0000N.safetensors +
// model.safetensors.index.json) for tests and benchmarks.
//
// Weights are seeded per tensor (see random.h), so the same options give the same
// bytes whatever the sharding. Scales are chosen so every layer changes the
// residual stream substantially and greedy continuations depend on the context:
//   embed_tokens           N(0, 1 / D)  (small against the layers' outputs, so a tied
//                                        LM head does not just echo the current token)
//   q/k_proj               N(0, (1.5)^2 / D)       (sharper attention)
//   v_proj, gate/up_proj   N(0, 1 / fan_in)
//   o_proj, down_proj      N(0, 2^2 / fan_in)      (residual branches outweigh the embedding)
//   q/k/v bias (Qwen2)     N(0, 0.5^2)
//   every norm weight      1 + N(0, 0.2^2)
//   lm_head (untied)       N(0, 1 / D)
// Shards are written one at a time (a shard's tensors plus one tensor being
// generated are in memory at once); without --shards, files are split at about
// 500 MB.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/dtype.h"

namespace tpserve::make_model {

struct MakeModelOptions {
  std::filesystem::path out;
  Architecture arch = Architecture::kLlama;
  int64_t hidden = 0;         // D
  int64_t intermediate = 0;   // F
  int64_t layers = 0;
  int64_t heads = 0;          // H
  int64_t kv_heads = 0;       // Hkv
  int64_t head_dim = 0;       // explicit in config.json (Qwen2: only when != D / H)
  int64_t vocab = 0;          // 0: the tokenizer's size
  int64_t max_pos = 0;
  int64_t shards = 0;         // 0: one file, or ~500 MB files when bigger
  DType dtype = DType::kBF16;
  bool tie = true;
  uint64_t seed = 0;
  double rope_theta = 0;
  double rms_norm_eps = 0;
  RopeScaling rope_scaling;
  std::filesystem::path tokenizer_dir;  // empty: write the small built-in tokenizer
  uint64_t auto_shard_bytes = 500'000'000;
};

// The usage text printed by --help and after an error.
std::string Usage();

// Parses the command line (without argv[0]): OUT plus --name value / --name=value
// options, a preset filled in first and then overridden by explicit sizes.
// Anything unknown, missing or inconsistent is InvalidArgument naming the option.
absl::StatusOr<MakeModelOptions> ParseArgs(std::span<const std::string> args);

// One tensor of the model and how its values are drawn.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  float scale = 1;         // standard deviation of the random part
  bool around_one = false;  // norm weights: 1 + scale * N(0, 1)
};

// Every tensor of the model, in Hugging Face names and order.
std::vector<TensorSpec> PlanTensors(const MakeModelOptions& o);

// Contiguous groups of `tensors` (indices), one per file: exactly o.shards groups
// balanced by bytes when o.shards > 0, else split at o.auto_shard_bytes.
std::vector<std::vector<size_t>> PlanShards(const MakeModelOptions& o, const std::vector<TensorSpec>& tensors);

// Writes the whole model folder.
absl::Status MakeModel(const MakeModelOptions& o);

}  // namespace tpserve::make_model
