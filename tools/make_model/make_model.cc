// tpserve-make-model: options, tensor plan, sharding and writing. See make_model.h.
#include "tools/make_model/make_model.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tools/make_model/random.h"
#include "tools/make_model/test_tokenizer.h"

namespace tpserve::make_model {
namespace {

using OJson = nlohmann::ordered_json;

absl::Status BadOption(std::string_view option, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tpserve-make-model: --", std::string(option), " ", std::string(what), " (see --help)"));
}

const std::vector<std::string>& KnownOptions() {
  static const std::vector<std::string> kOptions = {
      "arch",  "hidden", "intermediate", "layers",     "heads",      "kv-heads",   "head-dim",
      "vocab", "max-pos", "shards",      "dtype",      "tie",        "seed",       "rope-scaling",
      "rope-theta", "rope-factor", "rope-original-max", "preset", "tokenizer", "max-shard-mb"};
  return kOptions;
}

absl::StatusOr<int64_t> ParseInt(std::string_view option, const std::string& value, int64_t min) {
  int64_t v = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc() || ptr != end || value.empty()) {
    return BadOption(option, absl::StrCat("expects an integer, got \"", value, "\""));
  }
  if (v < min) return BadOption(option, absl::StrCat("must be at least ", min, ", got ", v));
  return v;
}

absl::StatusOr<double> ParsePositiveDouble(std::string_view option, const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !(v > 0)) {
    return BadOption(option, absl::StrCat("expects a positive number, got \"", value, "\""));
  }
  return v;
}

// Real shapes of published checkpoints (see /work/shared/model-configs).
absl::Status ApplyPreset(const std::string& name, MakeModelOptions& o) {
  if (name == "qwen3-0.6b") {
    o.arch = Architecture::kQwen3;
    o.hidden = 1024, o.intermediate = 3072, o.layers = 28, o.heads = 16, o.kv_heads = 8, o.head_dim = 128;
    o.vocab = 151936, o.max_pos = 40960, o.rope_theta = 1e6, o.rms_norm_eps = 1e-6, o.tie = true;
    o.rope_scaling = RopeScaling{};
  } else if (name == "llama-3.2-1b") {
    o.arch = Architecture::kLlama;
    o.hidden = 2048, o.intermediate = 8192, o.layers = 16, o.heads = 32, o.kv_heads = 8, o.head_dim = 64;
    o.vocab = 128256, o.max_pos = 131072, o.rope_theta = 500000, o.rms_norm_eps = 1e-5, o.tie = true;
    o.rope_scaling = RopeScaling{RopeScaling::Type::kLlama3, 32.0, 1.0, 4.0, 8192};
  } else {
    return BadOption("preset", absl::StrCat("\"", name, "\" is unknown; supported: qwen3-0.6b, llama-3.2-1b"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Architecture> ParseArch(const std::string& value) {
  if (value == "llama") return Architecture::kLlama;
  if (value == "qwen3") return Architecture::kQwen3;
  if (value == "qwen2") return Architecture::kQwen2;
  return BadOption("arch", absl::StrCat("\"", value, "\" is unknown; supported: llama, qwen3, qwen2"));
}

std::string_view ModelType(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
  }
  return "";
}

uint64_t TensorBytes(const TensorSpec& t, DType dtype) {
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n * DTypeSize(dtype);
}

absl::Status WriteJson(const std::filesystem::path& path, const OJson& j) {
  std::ofstream out(path, std::ios::binary);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string(), "; check that the folder is writable"));
  return absl::OkStatus();
}

std::string ShardFileName(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// Removes model files a previous run may have left (another shard count).
absl::Status RemoveStaleWeights(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool stale = name == "model.safetensors" || name == "model.safetensors.index.json" ||
                       (name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
                        name.size() > 12 && name.ends_with(".safetensors"));
    if (stale) std::filesystem::remove(entry.path(), ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot remove old ", entry.path().string(), ": ", ec.message()));
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", dir.string(), ": ", ec.message()));
  return absl::OkStatus();
}

OJson ConfigJson(const MakeModelOptions& o, const TokenizerInfo& tok, int64_t vocab) {
  OJson j;
  j["architectures"] = {std::string(ArchitectureName(o.arch))};
  j["attention_bias"] = o.arch == Architecture::kQwen2;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = tok.bos_id;
  if (tok.config_eos.size() == 1) {
    j["eos_token_id"] = tok.config_eos[0];
  } else {
    j["eos_token_id"] = tok.config_eos;
  }
  if (o.arch != Architecture::kQwen2 || o.head_dim * o.heads != o.hidden) j["head_dim"] = o.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = o.hidden;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = o.intermediate;
  j["max_position_embeddings"] = o.max_pos;
  if (o.arch == Architecture::kLlama) j["mlp_bias"] = false;
  if (o.arch != Architecture::kLlama) j["max_window_layers"] = o.layers;
  j["model_type"] = std::string(ModelType(o.arch));
  j["num_attention_heads"] = o.heads;
  j["num_hidden_layers"] = o.layers;
  j["num_key_value_heads"] = o.kv_heads;
  if (o.arch == Architecture::kLlama) j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = o.rms_norm_eps;
  if (o.rope_scaling.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {{"factor", o.rope_scaling.factor},
                         {"high_freq_factor", o.rope_scaling.high_freq_factor},
                         {"low_freq_factor", o.rope_scaling.low_freq_factor},
                         {"original_max_position_embeddings", o.rope_scaling.original_max_position_embeddings},
                         {"rope_type", "llama3"}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["rope_theta"] = o.rope_theta;
  if (o.arch != Architecture::kLlama) {
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
  }
  j["tie_word_embeddings"] = o.tie;
  j["torch_dtype"] = o.dtype == DType::kBF16 ? "bfloat16" : "float32";
  j["transformers_version"] = "4.51.0";
  j["use_cache"] = true;
  j["vocab_size"] = vocab;
  return j;
}

// Draws one tensor's values straight into its stored dtype.
std::vector<uint8_t> GenerateTensor(const TensorSpec& t, DType dtype, uint64_t seed) {
  const uint64_t bytes = TensorBytes(t, dtype);
  const size_t n = bytes / DTypeSize(dtype);
  std::vector<uint8_t> buf(bytes);
  SplitMix64 rng(TensorSeed(seed, t.name));
  const float base = t.around_one ? 1.0f : 0.0f;
  if (dtype == DType::kBF16) {
    auto* p = reinterpret_cast<uint16_t*>(buf.data());
    for (size_t i = 0; i < n; ++i) p[i] = FloatToBf16(base + t.scale * rng.Normal());
  } else {
    auto* p = reinterpret_cast<float*>(buf.data());
    for (size_t i = 0; i < n; ++i) p[i] = base + t.scale * rng.Normal();
  }
  return buf;
}

}  // namespace

std::string Usage() {
  return R"(usage: tpserve-make-model OUT (--arch llama|qwen3|qwen2 | --preset qwen3-0.6b|llama-3.2-1b) [options]

Writes a random-weight model in the Hugging Face layout into folder OUT.
  --arch A               llama (Llama 3.x), qwen3 or qwen2
  --preset P             qwen3-0.6b or llama-3.2-1b: the real shapes (explicit sizes override)
  --hidden D             model width (default 64)
  --intermediate F       MLP width (default 160)
  --layers L             decoder layers (default 2)
  --heads H              query heads (default 4)
  --kv-heads K           key/value heads, must divide H (default H/2, or H when H is odd)
  --head-dim E           per-head width, even (default D/H)
  --vocab V              vocab_size, >= the tokenizer's size (default: the tokenizer's size)
  --max-pos N            max_position_embeddings (default 2048)
  --shards N             number of safetensors files (default: one, or ~500 MB each)
  --max-shard-mb M       without --shards: start a new file past M MB (default 500)
  --dtype bf16|f32       stored dtype (default bf16)
  --tie 0|1              tie the LM head to the embedding (default 1)
  --seed S               random seed (default 0)
  --rope-scaling llama3|none   default llama3 for llama (factor 8, original 256), none for Qwen
  --rope-theta T         default 500000 (llama), 1000000 (Qwen)
  --rope-factor X        llama3 scaling factor
  --rope-original-max N  llama3 original_max_position_embeddings
  --tokenizer DIR        copy tokenizer.json and tokenizer_config.json from DIR
                         (default: write a small byte-level BPE tokenizer of the family)

Examples:
  tpserve-make-model /tmp/m --arch qwen3 --layers 2 --hidden 128 --shards 2
  tpserve-make-model /tmp/q --preset qwen3-0.6b
)";
}

namespace {

// The options given on the command line, by name (without "--"), and OUT.
struct GivenArgs {
  std::map<std::string, std::string> options;
  std::filesystem::path out;

  bool has(const char* name) const { return options.contains(name); }
  const std::string& operator[](const char* name) const { return options.at(name); }
};

// Splits --name value / --name=value options from the one positional OUT;
// an unknown, repeated or value-less option is an error naming it.
absl::StatusOr<GivenArgs> CollectArgs(std::span<const std::string> args) {
  GivenArgs given;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= args.size()) return BadOption(name, "needs a value");
      value = args[++i];
    }
    bool known = false;
    for (const std::string& k : KnownOptions()) known = known || k == name;
    if (!known) return BadOption(name, "is not an option");
    if (!given.options.emplace(name, value).second) return BadOption(name, "is given twice");
  }
  if (positional.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tpserve-make-model: give exactly one output folder OUT (got ", positional.size(), ")\n\n", Usage()));
  }
  given.out = positional[0];
  return given;
}

// --preset then --arch (which must agree with the preset); one of them is required.
absl::Status ApplyArchitecture(const GivenArgs& given, MakeModelOptions& o) {
  if (given.has("preset")) TPSERVE_RETURN_IF_ERROR(ApplyPreset(given["preset"], o));
  if (given.has("arch")) {
    TPSERVE_ASSIGN_OR_RETURN(const Architecture arch, ParseArch(given["arch"]));
    if (given.has("preset") && arch != o.arch) {
      return BadOption("arch", absl::StrCat("\"", given["arch"], "\" contradicts --preset ", given["preset"]));
    }
    o.arch = arch;
  } else if (!given.has("preset")) {
    return BadOption("arch", "is required (llama, qwen3 or qwen2) unless --preset is given");
  }
  return absl::OkStatus();
}

// The sizes, seed, tie, dtype, tokenizer and shard options, over the preset.
absl::Status ApplySizeOptions(const GivenArgs& given, MakeModelOptions& o) {
  struct IntOption {
    const char* name;
    int64_t* dst;
    int64_t min;
  };
  for (const IntOption& io : {IntOption{"hidden", &o.hidden, 1}, IntOption{"intermediate", &o.intermediate, 1},
                              IntOption{"layers", &o.layers, 1}, IntOption{"heads", &o.heads, 1},
                              IntOption{"kv-heads", &o.kv_heads, 1}, IntOption{"head-dim", &o.head_dim, 2},
                              IntOption{"vocab", &o.vocab, 1}, IntOption{"max-pos", &o.max_pos, 1},
                              IntOption{"shards", &o.shards, 1}}) {
    if (given.has(io.name)) {
      TPSERVE_ASSIGN_OR_RETURN(*io.dst, ParseInt(io.name, given[io.name], io.min));
    }
  }
  if (given.has("seed")) {
    TPSERVE_ASSIGN_OR_RETURN(const int64_t seed, ParseInt("seed", given["seed"], 0));
    o.seed = static_cast<uint64_t>(seed);
  }
  if (given.has("tie")) {
    const std::string& t = given["tie"];
    if (t != "0" && t != "1") return BadOption("tie", absl::StrCat("expects 0 or 1, got \"", t, "\""));
    o.tie = t == "1";
  }
  if (given.has("dtype")) {
    const std::string& d = given["dtype"];
    if (d != "bf16" && d != "f32") {
      return BadOption("dtype", absl::StrCat("\"", d, "\" is unknown; supported: bf16, f32"));
    }
    o.dtype = d == "bf16" ? DType::kBF16 : DType::kF32;
  }
  if (given.has("tokenizer")) o.tokenizer_dir = given["tokenizer"];
  if (given.has("max-shard-mb")) {
    if (given.has("shards")) return BadOption("max-shard-mb", "and --shards exclude each other");
    TPSERVE_ASSIGN_OR_RETURN(const int64_t mb, ParseInt("max-shard-mb", given["max-shard-mb"], 1));
    o.auto_shard_bytes = static_cast<uint64_t>(mb) * 1'000'000;
  }
  return absl::OkStatus();
}

// Defaults for what neither a preset nor an option set, then the shape checks.
absl::Status ApplyDefaults(const GivenArgs& given, MakeModelOptions& o) {
  const bool llama = o.arch == Architecture::kLlama;
  if (o.hidden == 0) o.hidden = 64;
  if (o.intermediate == 0) o.intermediate = 160;
  if (o.layers == 0) o.layers = 2;
  if (o.heads == 0) o.heads = 4;
  if (o.kv_heads == 0) o.kv_heads = o.heads % 2 == 0 ? o.heads / 2 : o.heads;
  if (o.max_pos == 0) o.max_pos = 2048;
  if (o.head_dim == 0) {
    if (o.hidden % o.heads != 0) {
      return BadOption("head-dim",
                       absl::StrCat("is needed: --heads ", o.heads, " does not divide --hidden ", o.hidden));
    }
    o.head_dim = o.hidden / o.heads;
  }
  if (o.rms_norm_eps == 0) o.rms_norm_eps = llama ? 1e-5 : 1e-6;
  if (o.rope_theta == 0) o.rope_theta = llama ? 500000.0 : 1000000.0;
  if (!given.has("preset") && llama) {
    // A small original context so the scaled and smooth bands matter at short positions.
    o.rope_scaling = RopeScaling{RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 256};
  }
  if (o.heads % o.kv_heads != 0) {
    return BadOption("kv-heads", absl::StrCat("(", o.kv_heads, ") must divide --heads (", o.heads, ")"));
  }
  if (o.head_dim % 2 != 0) return BadOption("head-dim", absl::StrCat("(", o.head_dim, ") must be even for RoPE"));
  return absl::OkStatus();
}

// --rope-scaling, --rope-factor, --rope-original-max and --rope-theta.
absl::Status ApplyRopeOptions(const GivenArgs& given, MakeModelOptions& o) {
  if (given.has("rope-scaling")) {
    const std::string& r = given["rope-scaling"];
    if (r == "none") {
      o.rope_scaling = RopeScaling{};
    } else if (r == "llama3") {
      if (o.rope_scaling.type != RopeScaling::Type::kLlama3) {
        o.rope_scaling = RopeScaling{RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 256};
      }
    } else {
      return BadOption("rope-scaling", absl::StrCat("\"", r, "\" is unknown; supported: llama3, none"));
    }
  }
  for (const char* k : {"rope-factor", "rope-original-max"}) {
    if (given.has(k) && o.rope_scaling.type != RopeScaling::Type::kLlama3) {
      return BadOption(k, "only applies with --rope-scaling llama3");
    }
  }
  if (given.has("rope-factor")) {
    TPSERVE_ASSIGN_OR_RETURN(o.rope_scaling.factor, ParsePositiveDouble("rope-factor", given["rope-factor"]));
  }
  if (given.has("rope-original-max")) {
    TPSERVE_ASSIGN_OR_RETURN(o.rope_scaling.original_max_position_embeddings,
                             ParseInt("rope-original-max", given["rope-original-max"], 1));
  }
  if (given.has("rope-theta")) {
    TPSERVE_ASSIGN_OR_RETURN(o.rope_theta, ParsePositiveDouble("rope-theta", given["rope-theta"]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MakeModelOptions> ParseArgs(std::span<const std::string> args) {
  TPSERVE_ASSIGN_OR_RETURN(const GivenArgs given, CollectArgs(args));
  MakeModelOptions o;
  o.out = given.out;
  TPSERVE_RETURN_IF_ERROR(ApplyArchitecture(given, o));
  TPSERVE_RETURN_IF_ERROR(ApplySizeOptions(given, o));
  TPSERVE_RETURN_IF_ERROR(ApplyDefaults(given, o));
  TPSERVE_RETURN_IF_ERROR(ApplyRopeOptions(given, o));
  if (o.shards > 0) {
    const int64_t n = static_cast<int64_t>(PlanTensors(o).size());
    if (o.shards > n) {
      return BadOption("shards", absl::StrCat("(", o.shards, ") exceeds the number of tensors (", n, ")"));
    }
  }
  return o;
}

std::vector<TensorSpec> PlanTensors(const MakeModelOptions& o) {
  const int64_t D = o.hidden, F = o.intermediate, E = o.head_dim;
  const int64_t q_out = o.heads * E, kv_out = o.kv_heads * E;
  const float in_d = 1.0f / std::sqrt(static_cast<float>(D));
  constexpr float kResidualGain = 2.0f, kQkGain = 1.5f, kNormSpread = 0.2f, kBiasScale = 0.5f;
  std::vector<TensorSpec> t;
  // o.vocab is resolved against the tokenizer by MakeModel; 1 here only sizes the plan.
  const int64_t V = std::max<int64_t>(o.vocab, 1);
  t.push_back({"model.embed_tokens.weight", {V, D}, in_d, false});
  for (int64_t i = 0; i < o.layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    t.push_back({p + "input_layernorm.weight", {D}, kNormSpread, true});
    t.push_back({p + "self_attn.q_proj.weight", {q_out, D}, kQkGain * in_d, false});
    t.push_back({p + "self_attn.k_proj.weight", {kv_out, D}, kQkGain * in_d, false});
    t.push_back({p + "self_attn.v_proj.weight", {kv_out, D}, in_d, false});
    if (o.arch == Architecture::kQwen2) {
      t.push_back({p + "self_attn.q_proj.bias", {q_out}, kBiasScale, false});
      t.push_back({p + "self_attn.k_proj.bias", {kv_out}, kBiasScale, false});
      t.push_back({p + "self_attn.v_proj.bias", {kv_out}, kBiasScale, false});
    }
    if (o.arch == Architecture::kQwen3) {
      t.push_back({p + "self_attn.q_norm.weight", {E}, kNormSpread, true});
      t.push_back({p + "self_attn.k_norm.weight", {E}, kNormSpread, true});
    }
    t.push_back({p + "self_attn.o_proj.weight", {D, q_out}, kResidualGain / std::sqrt(static_cast<float>(q_out)),
                 false});
    t.push_back({p + "post_attention_layernorm.weight", {D}, kNormSpread, true});
    t.push_back({p + "mlp.gate_proj.weight", {F, D}, in_d, false});
    t.push_back({p + "mlp.up_proj.weight", {F, D}, in_d, false});
    t.push_back({p + "mlp.down_proj.weight", {D, F}, kResidualGain / std::sqrt(static_cast<float>(F)), false});
  }
  t.push_back({"model.norm.weight", {D}, kNormSpread, true});
  if (!o.tie) t.push_back({"lm_head.weight", {V, D}, in_d, false});
  return t;
}

std::vector<std::vector<size_t>> PlanShards(const MakeModelOptions& o, const std::vector<TensorSpec>& tensors) {
  std::vector<std::vector<size_t>> shards;
  if (o.shards > 0) {
    uint64_t total = 0;
    for (const TensorSpec& t : tensors) total += TensorBytes(t, o.dtype);
    const size_t n = static_cast<size_t>(o.shards);
    size_t next = 0;
    uint64_t cum = 0;
    for (size_t k = 0; k < n; ++k) {
      shards.emplace_back();
      // Leave at least one tensor for each later shard; otherwise fill up to the
      // k-th fraction of the bytes (a tensor goes where its middle falls).
      while (next < tensors.size() && tensors.size() - next > n - k - 1) {
        const uint64_t b = TensorBytes(tensors[next], o.dtype);
        const bool fits = k + 1 == n || (cum + b / 2) * n < total * (k + 1);
        if (!shards.back().empty() && !fits) break;
        shards.back().push_back(next++);
        cum += b;
      }
    }
    return shards;
  }
  uint64_t current = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = TensorBytes(tensors[i], o.dtype);
    if (shards.empty() || (!shards.back().empty() && current + b > o.auto_shard_bytes)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += b;
  }
  return shards;
}

absl::Status MakeModel(const MakeModelOptions& options) {
  MakeModelOptions o = options;
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", o.out.string(), ": ", ec.message()));

  // Tokenizer first: the vocabulary must cover it.
  const TokenizerFamily family = o.arch == Architecture::kLlama ? TokenizerFamily::kLlama3 : TokenizerFamily::kQwen;
  absl::StatusOr<TokenizerInfo> tok;
  if (!o.tokenizer_dir.empty()) {
    tok = CopyTokenizer(family, o.tokenizer_dir, o.out);
  } else {
    // Without --vocab the corpus decides (a little over a thousand ids).
    tok = WriteTestTokenizer(family, o.vocab > 0 ? o.vocab : 4096, o.max_pos, o.out);
  }
  if (!tok.ok()) return tok.status();
  if (o.vocab == 0) o.vocab = tok->size;
  if (o.vocab < tok->size) {
    return BadOption("vocab", absl::StrCat("(", o.vocab, ") is smaller than the tokenizer (", tok->size,
                                  " ids); give --vocab >= ", tok->size));
  }

  if (absl::Status s = WriteJson(o.out / "config.json", ConfigJson(o, *tok, o.vocab)); !s.ok()) return s;
  OJson gen;
  gen["bos_token_id"] = tok->bos_id;
  gen["eos_token_id"] = tok->generation_eos;
  gen["transformers_version"] = "4.51.0";
  if (absl::Status s = WriteJson(o.out / "generation_config.json", gen); !s.ok()) return s;
  // What we wrote must be what the server accepts.
  if (absl::StatusOr<ModelConfig> cfg = LoadModelConfig(o.out); !cfg.ok()) {
    return absl::InternalError(absl::StrCat("the generated config.json does not parse: ", cfg.status().message()));
  }

  // Weight files of a previous run (another shard count) would confuse a loader.
  if (absl::Status s = RemoveStaleWeights(o.out); !s.ok()) return s;
  const std::vector<TensorSpec> tensors = PlanTensors(o);
  const std::vector<std::vector<size_t>> shards = PlanShards(o, tensors);
  OJson weight_map = OJson::object();
  uint64_t total = 0, params = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? "model.safetensors" : ShardFileName(s, shards.size());
    SafetensorsWriter writer;
    for (size_t i : shards[s]) {
      const TensorSpec& t = tensors[i];
      std::vector<uint8_t> bytes = GenerateTensor(t, o.dtype, o.seed);
      writer.Add(t.name, o.dtype, t.shape, bytes.data());
      weight_map[t.name] = file;
      total += bytes.size();
      params += bytes.size() / DTypeSize(o.dtype);
    }
    if (absl::Status st = writer.Write(o.out / file); !st.ok()) return st;
  }
  if (shards.size() > 1) {
    OJson index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weight_map;
    if (absl::Status s = WriteJson(o.out / "model.safetensors.index.json", index); !s.ok()) return s;
  }
  std::printf("tpserve-make-model: wrote %s: %s, %lld parameters (%.1f MB %s) in %zu file(s), vocab %lld (tokenizer %lld)\n",
              o.out.string().c_str(), std::string(ArchitectureName(o.arch)).c_str(),
              static_cast<long long>(params), static_cast<double>(total) / 1e6,
              std::string(DTypeName(o.dtype)).c_str(), shards.size(), static_cast<long long>(o.vocab),
              static_cast<long long>(tok->size));
  return absl::OkStatus();
}

}  // namespace tpserve::make_model
