// Conformance with the Hugging Face tokenizers on the real Llama 3 and Qwen3
// tokenizer.json, against @lenml/tokenizers run with node in the same test.
// Skips with a message when scripts/fetch-tokenizers.sh could not fetch them.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/reference_env.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

std::vector<std::string> ReadCorpus() {
  std::ifstream in(fs::path(TPSERVE_SOURCE_DIR) / "tests/tokenizer/conformance_corpus.jsonl");
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  }
  return texts;
}

struct Reference {
  Ids plain, special;
  std::string decoded;
};

std::vector<Reference> RunNode(const fs::path& tokenizer_json, const fs::path& config_json, const fs::path& out) {
  const std::string cmd = "node " + testing::Quote(fs::path(TPSERVE_SOURCE_DIR) / "tests/tokenizer/reference_tokenize.js") +
                          " " + testing::Quote(testing::NodeModules()) + " " + testing::Quote(tokenizer_json) + " " +
                          testing::Quote(config_json) + " " +
                          testing::Quote(fs::path(TPSERVE_SOURCE_DIR) / "tests/tokenizer/conformance_corpus.jsonl") +
                          " > " + testing::Quote(out);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<Reference> refs;
  std::ifstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    refs.push_back({j.at("plain").get<Ids>(), j.at("special").get<Ids>(), j.at("decoded").get<std::string>()});
  }
  return refs;
}

std::string Show(const std::string& s) { return nlohmann::json(s).dump(); }
std::string Show(const Ids& ids) { return nlohmann::json(ids).dump(); }

// Encodes the corpus with ours and the reference; returns the reference for more checks.
void ExpectConformance(const fs::path& tokenizer_json, const fs::path& config_json, const Tokenizer& tok) {
  const std::vector<std::string> corpus = ReadCorpus();
  ASSERT_GE(corpus.size(), 300u);
  const fs::path out = fs::path(::testing::TempDir()) / ("reference_" + tokenizer_json.parent_path().filename().string() +
                                                        "_" + std::to_string(::getpid()) + ".jsonl");
  const std::vector<Reference> refs = RunNode(tokenizer_json, config_json, out);
  ASSERT_EQ(refs.size(), corpus.size()) << "the node reference printed the wrong number of lines";
  int id_mismatches = 0, decode_mismatches = 0, round_trips = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string& s = corpus[i];
    const Ids plain = tok.Encode(s, false), special = tok.Encode(s, true);
    if (plain != refs[i].plain || special != refs[i].special) {
      if (++id_mismatches <= 10) {
        ADD_FAILURE() << "line " << i + 1 << " " << Show(s) << "\n ours plain " << Show(plain) << "\n  ref plain "
                      << Show(refs[i].plain) << "\n ours special " << Show(special) << "\n  ref special "
                      << Show(refs[i].special);
      }
    }
    auto decoded = tok.Decode(plain, false);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    if (*decoded != refs[i].decoded) {
      if (++decode_mismatches <= 10) {
        ADD_FAILURE() << "line " << i + 1 << " decode differs: ours " << Show(*decoded) << " ref "
                      << Show(refs[i].decoded);
      }
    }
    // Round trip wherever the reference round-trips (NFC may change Qwen's input).
    if (refs[i].decoded == s) {
      ++round_trips;
      EXPECT_EQ(*decoded, s) << "line " << i + 1;
    }
    // Streaming gives the same text.
    IncrementalDetokenizer detok(tok, false);
    std::string streamed;
    for (int32_t id : plain) streamed += detok.Add(id);
    streamed += detok.Finish();
    EXPECT_EQ(streamed, *decoded) << "line " << i + 1;
  }
  EXPECT_EQ(id_mismatches, 0) << "of " << corpus.size() << " lines";
  EXPECT_EQ(decode_mismatches, 0);
  EXPECT_GE(round_trips, static_cast<int>(corpus.size()) * 9 / 10) << "the reference round-trips too rarely";
  std::cout << tokenizer_json << ": " << corpus.size() << " lines, ids identical; " << round_trips
            << " round trips checked\n";
}

std::unique_ptr<Tokenizer> LoadReal(const fs::path& dir) {
  auto t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(Conformance, Llama3) {
  auto dir = testing::RealTokenizerDir("llama3");
  if (!dir || !testing::HaveNodeReference()) GTEST_SKIP() << testing::SkipMessage();
  auto tok = LoadReal(*dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("The answer is 4", false), (Ids{791, 4320, 374, 220, 19}));
  EXPECT_EQ(tok->vocab_size(), 128256);
  EXPECT_TRUE(tok->IsSpecial(*tok->TokenToId("<|eot_id|>")));
  ExpectConformance(*dir / "tokenizer.json", *dir / "tokenizer_config.json", *tok);
}

// The npm copy of Llama 3's tokenizer.json has a bare ByteLevel post-processor;
// Meta's own file wraps it with a TemplateProcessing that prepends
// <|begin_of_text|>. Check that variant too, so the BOS path is compared.
TEST(Conformance, Llama3WithBosTemplate) {
  auto dir = testing::RealTokenizerDir("llama3");
  if (!dir || !testing::HaveNodeReference()) GTEST_SKIP() << testing::SkipMessage();
  nlohmann::json j = nlohmann::json::parse(std::ifstream(*dir / "tokenizer.json"));
  j["post_processor"] = nlohmann::json::parse(R"({
    "type": "Sequence",
    "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}}}
    ]})");
  const fs::path tmp = fs::path(::testing::TempDir()) / ("llama3_bos_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  std::ofstream(tmp / "tokenizer.json") << j.dump();
  auto tok = LoadReal(tmp);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("The answer is 4", true), (Ids{128000, 791, 4320, 374, 220, 19}));
  ExpectConformance(tmp / "tokenizer.json", *dir / "tokenizer_config.json", *tok);
  fs::remove_all(tmp);
}

TEST(Conformance, Qwen3) {
  auto dir = testing::RealTokenizerDir("qwen3");
  if (!dir || !testing::HaveNodeReference()) GTEST_SKIP() << testing::SkipMessage();
  auto tok = LoadReal(*dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("<|im_start|>user", true), (Ids{151644, 872}));
  EXPECT_TRUE(tok->IsSpecial(*tok->TokenToId("<|im_end|>")));
  EXPECT_FALSE(tok->IsSpecial(*tok->TokenToId("<think>")));
  ExpectConformance(*dir / "tokenizer.json", *dir / "tokenizer_config.json", *tok);
}

}  // namespace
}  // namespace tpserve
