// The JSON Schema grammars token by token through the engine (grammar/matcher.h)
// and the real Llama 3 and Qwen3 tokenizers (scripts/fetch-tokenizers.sh), as
// the sampler would run them: before each token the mask, the token must be in
// it, then Accept; after the last the output must be complete (stop ids
// allowed). Every text is also held against the test oracle
// (grammar_oracle.h), and the two must agree:
//   * the JSON Schema Test Suite (draft 4, scripts/fetch-json-schema-suite.sh):
//     a valid instance is accepted in some member order, an invalid one in none
//     (json_schema_instances.h);
//   * the corpus (tests/grammar/data/): every instance, compact and indented.
// Skips with a message without the tokenizers; the suite part without the suite.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "tests/grammar/json_schema_instances.h"
#include "tests/grammar/json_schema_test_util.h"
#include "tests/tokenizer/reference_env.h"
#include "tokenizer/tokenizer.h"

namespace tpserve::grammar {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct Model {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const Vocabulary> vocabulary;
};

// Each id's bytes alone; the special tokens never allowed inside, and the
// first of the usual end tokens as the stop id.
std::optional<Model> LoadModel(const std::string& name) {
  auto dir = tpserve::testing::RealTokenizerDir(name);
  if (!dir) return std::nullopt;
  auto tok = Tokenizer::Load(*dir / "tokenizer.json");
  if (!tok.ok()) return std::nullopt;
  const int32_t n = (*tok)->vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> special(static_cast<size_t>(n), false);
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < n; ++id) {
    if (auto b = (*tok)->TokenBytes(id)) bytes[static_cast<size_t>(id)] = *std::move(b);
    special[static_cast<size_t>(id)] = (*tok)->IsSpecial(id);
  }
  for (const char* end : {"<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>"}) {
    const auto ids = (*tok)->Encode(end, false);
    if (ids.size() == 1 && (*tok)->IsSpecial(ids[0])) {
      stops.push_back(ids[0]);
      break;
    }
  }
  auto vocab = Vocabulary::Create(std::move(bytes), stops, std::move(special));
  if (!vocab.ok()) return std::nullopt;
  return Model{name, *std::move(tok), *std::move(vocab)};
}

// Whether the engine takes `text` as the sampler would; `where` gets the first
// refused token's index (the token count when only the end was refused).
bool MatcherAccepts(const std::shared_ptr<const CompiledGrammar>& g, const Model& m, const std::string& text,
                    std::string* where) {
  const std::vector<int32_t> ids = m.tokenizer->Encode(text, false, SpecialTokensInText::kAsText);
  Matcher matcher(g);
  std::vector<uint32_t> words(MaskWords(m.vocabulary->size()));
  for (size_t i = 0; i < ids.size(); ++i) {
    matcher.FillMask(words);
    const auto t = static_cast<uint32_t>(ids[i]);
    const bool allowed = ((words[t / 32] >> (t % 32)) & 1u) != 0;
    const bool took = matcher.Accept(ids[i]);
    EXPECT_EQ(allowed, took) << m.name << ": the mask and Accept disagree on token " << i << " of " << text;
    if (!took) {
      *where = "token " + std::to_string(i) + " " + json(m.tokenizer->TokenBytes(ids[i]).value_or("?")).dump();
      return false;
    }
  }
  matcher.FillMask(words);
  for (int32_t stop : m.vocabulary->stop_ids()) {
    const auto t = static_cast<uint32_t>(stop);
    EXPECT_EQ(((words[t / 32] >> (t % 32)) & 1u) != 0, matcher.IsComplete()) << m.name << ": " << text;
  }
  if (!matcher.IsComplete()) {
    *where = "the end (incomplete after " + std::to_string(ids.size()) + " tokens)";
    return false;
  }
  return true;
}

// The first grammar to use a terminal builds its lexer masks over the whole
// vocabulary (cached for the next ones); on a loaded test machine that can pass
// the default 2 s, which is not what this test is about.
CompileLimits Limits() {
  CompileLimits limits;
  limits.max_time = absl::Seconds(60);
  return limits;
}

std::vector<Model> Models() {
  std::vector<Model> models;
  for (const char* name : {"llama3", "qwen3"}) {
    if (auto m = LoadModel(name)) models.push_back(*std::move(m));
  }
  return models;
}

class JsonSchemaTokenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { models_ = new std::vector<Model>(Models()); }
  static void TearDownTestSuite() { delete models_; }
  static std::vector<Model>* models_;
};
std::vector<Model>* JsonSchemaTokenTest::models_ = nullptr;

TEST_F(JsonSchemaTokenTest, Corpus) {
  if (models_->size() < 2) GTEST_SKIP() << tpserve::testing::SkipMessage();
  std::ifstream in(fs::path(TPSERVE_SOURCE_DIR) / "tests/grammar/data/json_schema_corpus.jsonl");
  std::string line;
  int texts = 0;
  std::vector<std::pair<double, std::string>> compile_ms;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json entry = json::parse(line);
    for (JsonLayout layout : {JsonLayout::kCompact, JsonLayout::kIndented}) {
      GrammarSpec spec;
      spec.kind = GrammarSpec::Kind::kJsonSchema;
      spec.text = entry.at("schema").dump();
      spec.layout = layout;
      for (const Model& m : *models_) {
        const auto start = std::chrono::steady_clock::now();
        auto g = Compile(spec, m.vocabulary, Limits());
        compile_ms.emplace_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
            entry.at("name").get<std::string>() + " " + m.name + (layout == JsonLayout::kIndented ? " indented" : ""));
        ASSERT_TRUE(g.ok()) << entry.at("name") << " " << m.name << ": " << g.status();
        for (const json& instance : entry.at("instances")) {
          const std::string text = layout == JsonLayout::kCompact ? instance.dump() : instance.dump(2);
          std::string where;
          EXPECT_TRUE(MatcherAccepts(*g, m, text, &where))
              << entry.at("name") << " " << m.name << ": the engine refuses " << where << " of " << text;
          ++texts;
        }
      }
    }
  }
  std::sort(compile_ms.begin(), compile_ms.end());
  std::cout << "corpus through the engine: " << texts << " texts (2 tokenizers x 2 layouts); Compile p50 "
            << compile_ms[compile_ms.size() / 2].first << " ms, p99 " << compile_ms[compile_ms.size() * 99 / 100].first
            << " ms; slowest:";
  for (size_t i = compile_ms.size(); i-- > compile_ms.size() - 3;) {
    std::cout << " " << compile_ms[i].second << " " << compile_ms[i].first << " ms;";
  }
  std::cout << "\n";
}

TEST_F(JsonSchemaTokenTest, Suite) {
  if (models_->size() < 2) GTEST_SKIP() << tpserve::testing::SkipMessage();
  const fs::path dir = tpserve::testing::NodeModules() / "json-schema-test-suite" / "tests" / "draft4";
  if (!fs::exists(dir)) GTEST_SKIP() << "no JSON Schema Test Suite under " << dir << ": run scripts/fetch-json-schema-suite.sh";
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  int checked = 0, valid_accepted = 0, invalid_rejected = 0, disagreements = 0;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    for (const json& group : json::parse(in)) {
      json schema = group.at("schema");
      if (schema.is_object() && !schema.contains("$schema")) schema["$schema"] = "http://json-schema.org/draft-04/schema#";
      auto oracle = testing::CompileForTest(schema.dump());
      if (!oracle.ok()) continue;  // refused: json_schema_suite_test lists these
      GrammarSpec spec;
      spec.kind = GrammarSpec::Kind::kJsonSchema;
      spec.text = schema.dump();
      for (const Model& m : *models_) {
        auto g = Compile(spec, m.vocabulary, Limits());
        ASSERT_TRUE(g.ok()) << file.filename() << " " << group.at("description") << ": " << g.status();
        for (const json& test : group.at("tests")) {
          bool complete = true;
          std::string where;
          const bool engine = testing::AnyOrderAccepted(
              test.at("data"), [&](const std::string& s) { return MatcherAccepts(*g, m, s, &where); }, &complete);
          const bool reference = testing::AnyOrderAccepted(
              test.at("data"), [&](const std::string& s) { return oracle->Accepts(s); }, &complete);
          const bool valid = test.at("valid").get<bool>();
          ++checked;
          const std::string what = file.filename().string() + " / " + group.at("description").get<std::string>() +
                                   " / " + test.at("description").get<std::string>() + " (" + m.name + "): " +
                                   testing::WriteScalar(test.at("data"));
          if (engine != reference) {
            ++disagreements;
            ADD_FAILURE() << "the engine and the oracle disagree (engine " << engine << ", at " << where << "): " << what;
          }
          if (!valid && engine) ADD_FAILURE() << "INVALID INSTANCE ACCEPTED by the engine: " << what;
          if (valid && engine) ++valid_accepted;
          if (!valid && !engine) ++invalid_rejected;
        }
      }
    }
  }
  std::cout << "suite through the engine: " << checked << " instance checks, valid accepted " << valid_accepted
            << ", invalid rejected " << invalid_rejected << ", disagreements with the oracle " << disagreements
            << "\n";
  EXPECT_EQ(disagreements, 0);
}

}  // namespace
}  // namespace tpserve::grammar
