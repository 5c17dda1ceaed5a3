// Tests for tpserve-make-model: generated models of each family load (config
// parses, checkpoint opens, every expected tensor present with the right shape,
// index consistent when sharded), the weights do not depend on the sharding, the
// tokenizer files are well formed, greedy continuations computed by the float64
// reference forward (tools/reference_forward.py) depend on the context, writing
// is streamed, and bad options are clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/sanitizers.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/make_model/make_model.h"

extern char** environ;

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kWorkDir = fs::path(TPSERVE_BINARY_DIR) / "make_model_test";

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

RunResult RunCommand(const std::string& command) {
  RunResult r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs tpserve-make-model OUT args...; fails the test when it does not succeed.
fs::path MakeModel(const std::string& name, const std::string& args) {
  const fs::path out = kWorkDir / name;
  fs::remove_all(out);
  const RunResult r = RunCommand(ShellQuote(TPSERVE_MAKE_MODEL) + " " + ShellQuote(out.string()) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return out;
}

Json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// The tensors a Hugging Face checkpoint of this shape has, with their shapes.
std::map<std::string, std::vector<int64_t>> ExpectedTensors(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> t;
  const int64_t D = c.hidden_size, F = c.intermediate_size, E = c.head_dim;
  const int64_t Q = c.num_heads * E, KV = c.num_kv_heads * E;
  t["model.embed_tokens.weight"] = {c.vocab_size, D};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t[p + "input_layernorm.weight"] = {D};
    t[p + "post_attention_layernorm.weight"] = {D};
    t[p + "self_attn.q_proj.weight"] = {Q, D};
    t[p + "self_attn.k_proj.weight"] = {KV, D};
    t[p + "self_attn.v_proj.weight"] = {KV, D};
    t[p + "self_attn.o_proj.weight"] = {D, Q};
    if (c.qkv_bias) {
      t[p + "self_attn.q_proj.bias"] = {Q};
      t[p + "self_attn.k_proj.bias"] = {KV};
      t[p + "self_attn.v_proj.bias"] = {KV};
    }
    if (c.qk_norm) {
      t[p + "self_attn.q_norm.weight"] = {E};
      t[p + "self_attn.k_norm.weight"] = {E};
    }
    t[p + "mlp.gate_proj.weight"] = {F, D};
    t[p + "mlp.up_proj.weight"] = {F, D};
    t[p + "mlp.down_proj.weight"] = {D, F};
  }
  t["model.norm.weight"] = {D};
  if (!c.tie_word_embeddings) t["lm_head.weight"] = {c.vocab_size, D};
  return t;
}

// Loads the folder the way the server does and checks every tensor.
void ExpectLoads(const fs::path& dir, DType dtype) {
  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const auto expected = ExpectedTensors(*cfg);
  std::vector<std::string> names;
  for (const auto& [name, shape] : expected) names.push_back(name);
  EXPECT_EQ((*ckpt)->TensorNames(), names);
  for (const auto& [name, shape] : expected) {
    absl::StatusOr<const TensorInfo*> info = (*ckpt)->Info(name);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ((*info)->shape, shape) << name;
    EXPECT_EQ((*info)->dtype, dtype) << name;
  }
  // Norm weights are around 1, with spread; matrices are centred.
  absl::StatusOr<std::vector<float>> norm = (*ckpt)->ReadF32("model.norm.weight");
  ASSERT_TRUE(norm.ok()) << norm.status();
  double mean = 0;
  for (float v : *norm) mean += v;
  mean /= static_cast<double>(norm->size());
  EXPECT_NEAR(mean, 1.0, 0.15);
  EXPECT_NE(*std::min_element(norm->begin(), norm->end()), *std::max_element(norm->begin(), norm->end()));

  // The tokenizer is covered by the vocabulary and its special ids are the config's.
  const Json tok = ReadJson(dir / "tokenizer.json");
  std::map<std::string, int64_t> added;
  int64_t max_id = 0;
  for (const Json& t : tok["added_tokens"]) {
    added[t["content"].get<std::string>()] = t["id"].get<int64_t>();
    max_id = std::max(max_id, t["id"].get<int64_t>());
  }
  for (const auto& [token, id] : tok["model"]["vocab"].items()) max_id = std::max(max_id, id.get<int64_t>());
  EXPECT_LT(max_id, cfg->vocab_size);
  absl::StatusOr<ChatFormat> format = DetectChatFormat(dir);
  ASSERT_TRUE(format.ok()) << format.status();
  if (cfg->arch == Architecture::kLlama) {
    EXPECT_EQ(*format, ChatFormat::kLlama3);
    EXPECT_EQ(cfg->bos_token_id, added.at("<|begin_of_text|>"));
    EXPECT_THAT(cfg->eos_token_ids, ::testing::ElementsAre(added.at("<|end_of_text|>"), added.at("<|eot_id|>")));
  } else {
    EXPECT_EQ(*format, ChatFormat::kChatML);
    EXPECT_EQ(cfg->bos_token_id, added.at("<|endoftext|>"));
    EXPECT_THAT(cfg->eos_token_ids, ::testing::ElementsAre(added.at("<|im_end|>"), added.at("<|endoftext|>")));
  }
}

struct Reference {
  std::vector<int64_t> tokens;
  std::vector<double> logits_last;
};

Reference RunReference(const fs::path& dir, const std::vector<int64_t>& prompt, int steps) {
  std::string ids;
  for (int64_t t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const RunResult r = RunCommand(ShellQuote(TPSERVE_PYTHON3) + " " +
                          ShellQuote(std::string(TPSERVE_SOURCE_DIR) + "/tools/reference_forward.py") + " " +
                          ShellQuote(dir.string()) + " --prompt-ids " + ids + " --steps " + std::to_string(steps));
  EXPECT_EQ(r.exit_code, 0) << "reference_forward.py failed (it needs python3-numpy: scripts/install-deps.sh):\n"
                            << r.output;
  Reference ref;
  if (r.exit_code != 0) return ref;
  const Json j = Json::parse(r.output);
  ref.tokens = j["tokens"].get<std::vector<int64_t>>();
  ref.logits_last = j["logits_last"].get<std::vector<double>>();
  return ref;
}

// Greedy continuations must depend on the context: prompts that share their last
// token but differ before it continue differently, and no continuation is the
// last token repeated.
void ExpectContextMatters(const fs::path& dir, int64_t vocab) {
  const std::vector<std::vector<int64_t>> prompts = {
      {10, 20, 30, 40, 50}, {99, 88, 77, 66, 50}, {5, 6, 7, 8, 9, 10, 11, 12, 50}, {300, 301, 302}, {50}};
  std::set<std::vector<int64_t>> distinct;
  for (const auto& p : prompts) {
    const Reference ref = RunReference(dir, p, 12);
    ASSERT_EQ(ref.tokens.size(), 12u);
    ASSERT_EQ(static_cast<int64_t>(ref.logits_last.size()), vocab);
    EXPECT_NE(ref.tokens, std::vector<int64_t>(12, p.back())) << "echoes the last prompt token";
    EXPECT_GE(std::set<int64_t>(ref.tokens.begin(), ref.tokens.end()).size(), 3u) << "a fixed point";
    distinct.insert(ref.tokens);
  }
  EXPECT_EQ(distinct.size(), prompts.size()) << "prompts ending in the same token continue the same way";
}

TEST(MakeModelTest, LlamaUntiedF32WithLlama3Rope) {
  const fs::path dir = MakeModel("llama", "--arch llama --dtype f32 --tie 0 --seed 7");
  ExpectLoads(dir, DType::kF32);
  const ModelConfig cfg = LoadModelConfig(dir).value();
  EXPECT_EQ(cfg.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_FALSE(cfg.tie_word_embeddings);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  ExpectContextMatters(dir, cfg.vocab_size);
}

TEST(MakeModelTest, Qwen3TiedBf16ThreeShards) {
  const fs::path dir = MakeModel("qwen3", "--arch qwen3 --hidden 48 --heads 4 --kv-heads 2 --head-dim 16 --shards 3");
  ExpectLoads(dir, DType::kBF16);
  const ModelConfig cfg = LoadModelConfig(dir).value();
  EXPECT_EQ(cfg.head_dim, 16);  // explicit, != 48 / 4
  EXPECT_TRUE(cfg.qk_norm);

  // The index names three files, each holding exactly the tensors mapped to it.
  const Json index = ReadJson(dir / "model.safetensors.index.json");
  std::map<std::string, std::set<std::string>> by_file;
  for (const auto& [tensor, file] : index["weight_map"].items()) by_file[file.get<std::string>()].insert(tensor);
  ASSERT_EQ(by_file.size(), 3u);
  uint64_t total = 0;
  int i = 1;
  for (const auto& [file, tensors] : by_file) {
    EXPECT_EQ(file, "model-0000" + std::to_string(i++) + "-of-00003.safetensors");
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(dir / file);
    ASSERT_TRUE(f.ok()) << f.status();
    std::set<std::string> in_file;
    for (const TensorInfo& t : (*f)->tensors()) {
      in_file.insert(t.name);
      total += t.end - t.begin;
    }
    EXPECT_EQ(in_file, tensors) << file;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  ExpectContextMatters(dir, cfg.vocab_size);
}

TEST(MakeModelTest, Qwen2BiasOddVocabTied) {
  const fs::path dir = MakeModel("qwen2", "--arch qwen2 --hidden 96 --heads 6 --kv-heads 2 --vocab 1001 --seed 3");
  ExpectLoads(dir, DType::kBF16);
  const ModelConfig cfg = LoadModelConfig(dir).value();
  EXPECT_TRUE(cfg.qkv_bias);
  EXPECT_EQ(cfg.vocab_size, 1001);
  EXPECT_EQ(cfg.rope_scaling.type, RopeScaling::Type::kNone);
  ExpectContextMatters(dir, cfg.vocab_size);
}

TEST(MakeModelTest, ReferenceForwardRejectsBrokenInputs) {
  const fs::path dir = MakeModel("ref_bad", "--arch qwen3 --layers 1 --shards 2");
  const std::string ref = ShellQuote(TPSERVE_PYTHON3) + " " +
                          ShellQuote(std::string(TPSERVE_SOURCE_DIR) + "/tools/reference_forward.py") + " ";
  const int64_t vocab = LoadModelConfig(dir).value().vocab_size;
  RunResult r = RunCommand(ref + ShellQuote(dir.string()) + " --prompt-ids " + std::to_string(vocab) + " --steps 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("outside the vocabulary"));
  r = RunCommand(ref + ShellQuote(dir.string()) + " --prompt-ids 1,x --steps 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  fs::remove(dir / "model-00002-of-00002.safetensors");
  r = RunCommand(ref + ShellQuote(dir.string()) + " --prompt-ids 1,2 --steps 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model-00002-of-00002.safetensors"));
}

TEST(MakeModelTest, WeightsDoNotDependOnShardingButOnSeed) {
  const fs::path one = MakeModel("seed1_one", "--arch llama --layers 3 --seed 1 --shards 1");
  const fs::path four = MakeModel("seed1_four", "--arch llama --layers 3 --seed 1 --shards 4");
  const fs::path other = MakeModel("seed2", "--arch llama --layers 3 --seed 2");
  auto a = Checkpoint::Open(one), b = Checkpoint::Open(four), c = Checkpoint::Open(other);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ((*a)->TensorNames(), (*b)->TensorNames());
  for (const std::string& name : (*a)->TensorNames()) {
    EXPECT_EQ((*a)->ReadF32(name).value(), (*b)->ReadF32(name).value()) << name;
    EXPECT_NE((*a)->ReadF32(name).value(), (*c)->ReadF32(name).value()) << name;
  }
  // Tensors differ from each other too (each has its own stream).
  EXPECT_NE((*a)->ReadF32("model.layers.0.mlp.up_proj.weight").value(),
            (*a)->ReadF32("model.layers.0.mlp.gate_proj.weight").value());

  // Rewriting a folder with one file removes the old shards and index.
  const RunResult again = RunCommand(ShellQuote(TPSERVE_MAKE_MODEL) + " " + ShellQuote(four.string()) +
                                     " --arch llama --layers 3 --seed 1");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_FALSE(fs::exists(four / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(four / "model-00001-of-00004.safetensors"));
  EXPECT_TRUE(fs::exists(four / "model.safetensors"));
  EXPECT_TRUE(Checkpoint::Open(four).ok());
}

TEST(MakeModelTest, SmallTokenizerIsHuggingFaceByteLevelBpe) {
  const fs::path dir = MakeModel("tok_llama", "--arch llama --layers 1");
  const Json tok = ReadJson(dir / "tokenizer.json");
  const Json& vocab = tok["model"]["vocab"];
  EXPECT_EQ(tok["model"]["type"], "BPE");
  // The 256 byte symbols come first, in byte order: "!" is byte 33, "Ġ" (space) byte 32.
  EXPECT_EQ(vocab["!"], 33);
  EXPECT_EQ(vocab["\xC4\xA0"], 32);
  EXPECT_EQ(vocab["A"], 65);
  // Merges learned from English make common words single tokens.
  EXPECT_GE(tok["model"]["merges"].size(), 150u);
  for (const char* word : {"\xC4\xA0" "the", "\xC4\xA0" "and", "\xC4\xA0" "is", "The"}) {
    EXPECT_TRUE(vocab.contains(word)) << word;
  }
  // Every merge joins two vocabulary entries into a third.
  for (const Json& m : tok["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos);
    EXPECT_TRUE(vocab.contains(s.substr(0, sp)) && vocab.contains(s.substr(sp + 1)) &&
                vocab.contains(s.substr(0, sp) + s.substr(sp + 1)))
        << s;
  }
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  EXPECT_THAT(tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].get<std::string>(),
              HasSubstr("\\p{N}{1,3}"));
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(tok["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(tok["post_processor"]["processors"][1]["type"], "TemplateProcessing");
  EXPECT_EQ(tok["added_tokens"][0]["content"], "<|begin_of_text|>");
  EXPECT_EQ(tok["added_tokens"][0]["id"].get<int64_t>(), static_cast<int64_t>(vocab.size()));

  const fs::path qdir = MakeModel("tok_qwen", "--arch qwen3 --layers 1");
  const Json qtok = ReadJson(qdir / "tokenizer.json");
  EXPECT_EQ(qtok["normalizer"]["type"], "NFC");
  EXPECT_EQ(qtok["post_processor"]["type"], "ByteLevel");
  std::vector<std::string> specials;
  for (const Json& t : qtok["added_tokens"]) specials.push_back(t["content"]);
  EXPECT_THAT(specials, ::testing::ElementsAre("<|endoftext|>", "<|im_start|>", "<|im_end|>"));
}

// The project's tokenizer loads the generated files and behaves like the family's:
// common English is a few tokens, text round-trips, special tokens are recognised,
// Llama 3 prepends <|begin_of_text|> with add_special_tokens and Qwen adds nothing.
TEST(MakeModelTest, SmallTokenizerLoadsAndEncodes) {
  const std::string text = "The answer is simple. What is the capital of France?";
  for (const char* arch : {"llama", "qwen3"}) {
    const fs::path dir = MakeModel(std::string("tok_load_") + arch, std::string("--arch ") + arch + " --layers 1");
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Load(dir);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const ModelConfig cfg = LoadModelConfig(dir).value();
    EXPECT_LE((*tok)->vocab_size(), cfg.vocab_size);

    const std::vector<int32_t> ids = (*tok)->Encode(text, /*add_special_tokens=*/false);
    EXPECT_LT(ids.size(), text.size() / 3) << arch << ": common words should be few tokens";
    EXPECT_EQ((*tok)->Decode(ids, false).value(), text);
    const std::string odd = "  tabs\tand\r\nCRLF, 12345, caf\xC3\xA9 \xF0\x9F\x99\x82 \xE6\x97\xA5\xE6\x9C\xAC";
    EXPECT_EQ((*tok)->Decode((*tok)->Encode(odd, false), false).value(), odd) << arch;

    const std::vector<int32_t> with = (*tok)->Encode(text, /*add_special_tokens=*/true);
    const bool llama = std::string(arch) == "llama";
    ASSERT_EQ(with.size(), ids.size() + (llama ? 1 : 0)) << arch;
    if (llama) {
      EXPECT_EQ(with[0], cfg.bos_token_id.value());
    }

    // The rendered chat prompt's markers are single special tokens.
    const ChatFormat format = DetectChatFormat(dir).value();
    const std::vector<ChatMessage> chat = {{"user", "Hello!"}};
    const std::string prompt = RenderChat(format, chat).value();
    const std::vector<int32_t> prompt_ids = (*tok)->Encode(prompt, /*add_special_tokens=*/false);
    const std::string marker = llama ? "<|start_header_id|>" : "<|im_start|>";
    const int32_t marker_id = (*tok)->TokenToId(marker).value();
    EXPECT_TRUE((*tok)->IsSpecial(marker_id));
    EXPECT_EQ(std::count(prompt_ids.begin(), prompt_ids.end(), marker_id), 2) << arch;
    if (llama) {
      EXPECT_EQ(prompt_ids[0], cfg.bos_token_id.value());
    }
    EXPECT_EQ((*tok)->Decode(prompt_ids, false).value(), prompt);
  }
}

TEST(MakeModelTest, CopiesATokenizerFolder) {
  const fs::path src = MakeModel("tok_src", "--arch qwen3 --layers 1 --seed 5");
  const fs::path dir =
      MakeModel("tok_copy", "--arch qwen2 --layers 1 --vocab 700 --tokenizer " + ShellQuote(src.string()));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(ReadJson(src / f), ReadJson(dir / f)) << f;
  }
  ExpectLoads(dir, DType::kBF16);

  // A Qwen tokenizer does not serve a Llama model; a vocabulary smaller than it is refused.
  const std::string mm = ShellQuote(TPSERVE_MAKE_MODEL) + " " + ShellQuote((kWorkDir / "tok_bad").string());
  RunResult r = RunCommand(mm + " --arch llama --tokenizer " + ShellQuote(src.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("<|begin_of_text|>"));
  r = RunCommand(mm + " --arch qwen3 --vocab 300 --tokenizer " + ShellQuote(src.string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--vocab"));
  r = RunCommand(mm + " --arch qwen3 --tokenizer " + ShellQuote((kWorkDir / "nowhere").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("tokenizer.json"));
}

TEST(MakeModelTest, BadOptionsAreClearErrors) {
  const std::string mm = ShellQuote(TPSERVE_MAKE_MODEL) + " " + ShellQuote((kWorkDir / "bad").string());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "--arch"},
      {"--arch mistral", "--arch"},
      {"--arch llama --hidden 64 --heads 3", "--head-dim"},
      {"--arch llama --heads 8 --kv-heads 3", "--kv-heads"},
      {"--arch llama --head-dim 15", "--head-dim"},
      {"--arch llama --layers 0", "--layers"},
      {"--arch llama --layers two", "--layers"},
      {"--arch llama --dtype f16", "--dtype"},
      {"--arch llama --tie yes", "--tie"},
      {"--arch llama --shards 0", "--shards"},
      {"--arch llama --shards 500", "--shards"},
      {"--arch llama --vocab 100", "--vocab"},
      {"--arch llama --rope-scaling yarn", "--rope-scaling"},
      {"--arch qwen3 --rope-factor 4", "--rope-factor"},
      {"--preset qwen3-7b", "--preset"},
      {"--preset qwen3-0.6b --arch llama", "--arch"},
      {"--arch llama --frobnicate 1", "--frobnicate"},
      {"--arch llama --layers", "--layers"},
      {"--arch llama --layers 2 --layers 3", "--layers"},
      {"--arch llama --shards 2 --max-shard-mb 10", "--max-shard-mb"},
  };
  for (const auto& [args, expect] : cases) {
    const RunResult r = RunCommand(mm + " " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_THAT(r.output, HasSubstr(expect)) << args;
  }
  const RunResult two_outs = RunCommand(mm + " other --arch llama");
  EXPECT_NE(two_outs.exit_code, 0);
  EXPECT_THAT(two_outs.output, HasSubstr("one output folder"));
  const RunResult help = RunCommand(ShellQuote(TPSERVE_MAKE_MODEL) + " --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--preset"));
}

int64_t Params(const make_model::MakeModelOptions& o) {
  int64_t n = 0;
  for (const auto& t : make_model::PlanTensors(o)) {
    int64_t k = 1;
    for (int64_t d : t.shape) k *= d;
    n += k;
  }
  return n;
}

TEST(MakeModelTest, PresetsHaveTheRealShapes) {
  const std::vector<std::string> qwen = {"out", "--preset", "qwen3-0.6b"};
  absl::StatusOr<make_model::MakeModelOptions> q = make_model::ParseArgs(qwen);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(Params(*q), 596'049'920);  // Qwen/Qwen3-0.6B
  const std::vector<std::string> llama = {"out", "--preset=llama-3.2-1b"};
  absl::StatusOr<make_model::MakeModelOptions> l = make_model::ParseArgs(llama);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Params(*l), 1'235'814'400);  // meta-llama/Llama-3.2-1B
  EXPECT_EQ(l->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(l->rope_scaling.factor, 32.0);
  // Explicit sizes override the preset.
  const std::vector<std::string> small = {"out", "--preset", "qwen3-0.6b", "--layers", "2"};
  EXPECT_EQ(make_model::ParseArgs(small).value().layers, 2);

  // Automatic files stay under the limit unless one tensor alone exceeds it.
  const auto tensors = make_model::PlanTensors(*l);
  const auto shards = make_model::PlanShards(*l, tensors);
  size_t count = 0;
  for (const auto& s : shards) {
    ASSERT_FALSE(s.empty());
    uint64_t bytes = 0;
    for (size_t i : s) {
      EXPECT_EQ(i, count++) << "shards are contiguous and in order";
      int64_t k = 2;
      for (int64_t d : tensors[i].shape) k *= d;
      bytes += static_cast<uint64_t>(k);
    }
    EXPECT_TRUE(bytes <= l->auto_shard_bytes || s.size() == 1) << bytes;
  }
  EXPECT_EQ(count, tensors.size());
  EXPECT_EQ(shards.size(), 5u);  // the 525 MB embedding alone, then 4 x 4 layers of 122 MB
}

TEST(MakeModelTest, ExplicitShardsAreBalancedAndNonEmpty) {
  for (int64_t n : {1, 2, 3, 7, 20}) {
    std::vector<std::string> args = {"out", "--arch", "llama", "--layers", "2", "--shards", std::to_string(n)};
    const make_model::MakeModelOptions o = make_model::ParseArgs(args).value();
    const auto tensors = make_model::PlanTensors(o);
    const auto shards = make_model::PlanShards(o, tensors);
    ASSERT_EQ(static_cast<int64_t>(shards.size()), n);
    size_t count = 0;
    for (const auto& s : shards) {
      EXPECT_FALSE(s.empty()) << n;
      count += s.size();
    }
    EXPECT_EQ(count, tensors.size());
  }
}

// Peak resident memory of a child process, in bytes.
int64_t PeakRss(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  struct rusage usage {};
  if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

TEST(MakeModelTest, WritesShardByShard) {
#if TPSERVE_ASAN
  GTEST_SKIP() << "AddressSanitizer keeps freed shards in its quarantine, so peak RSS says nothing here";
#endif
  // ~400 MB of bf16 weights in files of at most 50 MB: the generator must not hold them all.
  const fs::path out = kWorkDir / "streamed";
  fs::remove_all(out);
  const int64_t peak = PeakRss({TPSERVE_MAKE_MODEL, out.string(), "--arch", "llama", "--hidden", "1024",
                                "--intermediate", "4096", "--layers", "12", "--heads", "16", "--kv-heads", "16",
                                "--max-shard-mb", "50"});
  ASSERT_GT(peak, 0) << "tpserve-make-model failed";
  uint64_t on_disk = 0;
  int files = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() == ".safetensors") {
      on_disk += fs::file_size(e.path());
      ++files;
      EXPECT_LE(fs::file_size(e.path()), 51'000'000u) << e.path();
    }
  }
  EXPECT_GT(on_disk, 390'000'000u);
  EXPECT_GE(files, 8);
  EXPECT_LT(peak, 200'000'000) << "peak RSS " << peak << " for " << on_disk << " bytes written";
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(out);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::printf("streamed %llu bytes in %d files with peak RSS %.1f MB\n", static_cast<unsigned long long>(on_disk),
              files, static_cast<double>(peak) / 1e6);
  fs::remove_all(out);
}

}  // namespace
}  // namespace tpserve
