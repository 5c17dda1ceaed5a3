// The corpus of tests/grammar/data/json_schema_corpus.jsonl (real-world-like
// tool and structured-output schemas, the benchmark's input): every schema
// compiles in both layouts, and every instance, written as it stands (the
// corpus keeps members in the grammar's order), is accepted compact and
// indented. With node and ajv (scripts/fetch-json-schema-suite.sh) the
// instances are also held valid by ajv, so the corpus says nothing false.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/grammar/json_schema_test_util.h"
#include "tests/tokenizer/reference_env.h"

namespace tpserve::grammar {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

TEST(JsonSchemaCorpusTest, SchemasCompileAndInstancesAreAccepted) {
  std::ifstream in(fs::path(TPSERVE_SOURCE_DIR) / "tests/grammar/data/json_schema_corpus.jsonl");
  ASSERT_TRUE(in) << "tests/grammar/data/json_schema_corpus.jsonl";
  std::string line;
  int schemas = 0, instances = 0;
  double slowest = 0;
  std::string slowest_name;
  const fs::path ajv_input = fs::path(::testing::TempDir()) / ("corpus_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream ajv_lines(ajv_input);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json entry = json::parse(line);
    const std::string name = entry.at("name").get<std::string>();
    const std::string schema = entry.at("schema").dump();
    ++schemas;
    for (JsonLayout layout : {JsonLayout::kCompact, JsonLayout::kIndented}) {
      const auto start = std::chrono::steady_clock::now();
      auto c = testing::CompileForTest(schema, layout);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s > slowest) {
        slowest = s;
        slowest_name = name;
      }
      ASSERT_TRUE(c.ok()) << name << ": " << c.status();
      for (const json& instance : entry.at("instances")) {
        const std::string text = layout == JsonLayout::kCompact ? instance.dump() : instance.dump(2);
        EXPECT_TRUE(c->Accepts(text)) << name << (layout == JsonLayout::kCompact ? "" : " (indented)")
                                      << " rejects its instance " << text;
        if (layout == JsonLayout::kCompact) {
          ++instances;
          ajv_lines << nlohmann::json{{"schema", entry.at("schema")}, {"text", text}}.dump() << "\n";
        }
      }
    }
  }
  ajv_lines.close();
  std::cout << "corpus: " << schemas << " schemas, " << instances << " instances; slowest compile (with the test's "
            << "regex checks) " << slowest * 1e3 << " ms (" << slowest_name << ")\n";
  EXPECT_GE(schemas, 100);

  const fs::path modules = tpserve::testing::NodeModules();
  if (!fs::exists(modules / "ajv" / "package.json") || !fs::exists(modules / "ajv-draft-04" / "package.json") ||
      std::system("node --version > /dev/null 2>&1") != 0) {
    std::cout << "ajv not available: the corpus instances were not validated (scripts/fetch-json-schema-suite.sh)\n";
    return;
  }
  const fs::path output = fs::path(::testing::TempDir()) / ("corpus_" + std::to_string(::getpid()) + ".out.jsonl");
  const std::string cmd = "node " + tpserve::testing::Quote(fs::path(TPSERVE_SOURCE_DIR) / "tests/grammar/ajv_validate.js") +
                          " " + tpserve::testing::Quote(modules) + " " + tpserve::testing::Quote(ajv_input) + " > " +
                          tpserve::testing::Quote(output);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream results(output);
  int valid = 0;
  while (std::getline(results, line)) {
    if (line.empty()) continue;
    const auto r = nlohmann::json::parse(line);
    if (r.at("ok").get<bool>()) {
      ++valid;
    } else {
      ADD_FAILURE() << "ajv: a corpus instance is invalid: " << r.at("error").get<std::string>();
    }
  }
  EXPECT_EQ(valid, instances);
  fs::remove(ajv_input);
  fs::remove(output);
}

}  // namespace
}  // namespace tpserve::grammar
