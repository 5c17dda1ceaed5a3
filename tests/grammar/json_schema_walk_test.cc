// What the JSON Schema grammars generate is valid, checked by an independent
// validator: random walks over each grammar (tests/grammar/grammar_oracle.h)
// in both layouts, every complete output validated by ajv with ajv-formats
// (tests/grammar/ajv_validate.js under node) against the schema. Schemas: the
// corpus of tests/grammar/data/, the JSON Schema Test Suite's draft 4 schemas
// that compile, and a few here. Skips with a message without node and the
// packages of scripts/fetch-json-schema-suite.sh. Seeds are fixed and printed
// with each failure; TPSERVE_KEEP_WALKS=1 keeps the generated texts.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/grammar/json_schema_test_util.h"
#include "tests/tokenizer/reference_env.h"

namespace tpserve::grammar {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct Named {
  std::string name;
  json schema;
};

// Schemas that reach every kind of terminal and rule the front end writes.
std::vector<Named> BuiltinSchemas() {
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"numbers", R"({"type":"object","properties":{"i":{"type":"integer","minimum":-40,"maximum":1234},
        "n":{"type":"number","exclusiveMinimum":-2.5,"maximum":1e3},"p":{"type":"number","exclusiveMinimum":0},
        "m":{"type":"integer","minimum":0,"maximum":100,"multipleOf":7},"big":{"type":"integer","minimum":9007199254740993},
        "any":{"type":"number"},"i32":{"type":"integer","format":"int32"}},"additionalProperties":false})"},
      {"strings", R"({"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":5},
        "p":{"type":"string","pattern":"^[A-Z][a-z]{1,8}(-[0-9]+)?$"},"q":{"type":"string","pattern":"x\\d"},
        "e":{"enum":["a\"b","\u00e9","line\nbreak",""]},"u":{"type":"string","pattern":"^\\w+\\s\\S*$","maxLength":12}},
        "required":["s","p","q","e","u"]})"},
      {"formats", R"({"type":"array","prefixItems":[{"format":"date-time","type":"string"},{"format":"date","type":"string"},
        {"format":"time","type":"string"},{"format":"email","type":"string"},{"format":"uuid","type":"string"},
        {"format":"ipv4","type":"string"},{"format":"ipv6","type":"string"},{"format":"hostname","type":"string"},
        {"format":"uri","type":"string"},{"format":"uri-reference","type":"string"},{"format":"json-pointer","type":"string"},
        {"format":"byte","type":"string"}],"items":false,"minItems":12})"},
      {"objects", R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"null"}},
        "required":["b","zz"],"additionalProperties":{"type":["boolean","null"]}})"},
      {"free", R"({"properties":{"a":{"type":"integer"}}})"},
      {"arrays", R"({"type":"array","prefixItems":[{"const":1},{"type":"string"}],"items":{"type":"boolean"},
        "minItems":1,"maxItems":5})"},
      {"anyOf", R"({"anyOf":[{"type":"string","maxLength":3},{"type":"array","items":{"$ref":"#"},"maxItems":3},{"type":"null"}]})"},
      {"oneOf", R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"],
        "additionalProperties":false},{"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},
        "required":["kind"],"additionalProperties":false}]})"},
      {"allOf", R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer","minimum":0}},"required":["a"]},
        {"properties":{"a":{"maximum":10},"b":{"type":"string","format":"email"}}}]})"},
      {"recursion", R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array",
        "items":{"$ref":"#/$defs/t"},"maxItems":3}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/t"})"},
      {"enum objects", R"({"enum":[{"x":[1,{"y":null}]},[],{},"s",1.5,-0.25,true]})"},
      {"counts", R"({"type":"object","properties":{"a":{"type":"integer","multipleOf":5},
        "b":{"type":"integer","multipleOf":4,"minimum":-100},"c":{"type":"integer","multipleOf":25,"maximum":-50}},
        "minProperties":1,"maxProperties":3,"additionalProperties":{"type":"integer","multipleOf":100,"minimum":150}})"},
  };
  std::vector<Named> out;
  for (const auto& [name, text] : texts) out.push_back({name, json::parse(text)});
  return out;
}

std::vector<Named> CorpusSchemas() {
  std::vector<Named> out;
  std::ifstream in(fs::path(TPSERVE_SOURCE_DIR) / "tests/grammar/data/json_schema_corpus.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    out.push_back({"corpus/" + j.at("name").get<std::string>(), j.at("schema")});
  }
  return out;
}

std::vector<Named> SuiteSchemas() {
  std::vector<Named> out;
  const fs::path dir = tpserve::testing::NodeModules() / "json-schema-test-suite" / "tests" / "draft4";
  if (!fs::exists(dir)) return out;
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f);
    for (const json& group : json::parse(in)) {
      json schema = group.at("schema");
      if (schema.is_object() && !schema.contains("$schema")) schema["$schema"] = "http://json-schema.org/draft-04/schema#";
      out.push_back({"suite/" + f.filename().string() + "/" + group.at("description").get<std::string>(), schema});
    }
  }
  return out;
}

TEST(JsonSchemaWalkTest, GeneratedInstancesAreValid) {
  const fs::path modules = tpserve::testing::NodeModules();
  if (!fs::exists(modules / "ajv" / "package.json") || !fs::exists(modules / "ajv-formats" / "package.json") ||
      !fs::exists(modules / "ajv-draft-04" / "package.json") || std::system("node --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "node or ajv not available under " << modules
                 << ": run scripts/fetch-json-schema-suite.sh (needs npm and the npm registry)";
  }
  std::vector<Named> schemas = BuiltinSchemas();
  for (const std::vector<Named>& more : {CorpusSchemas(), SuiteSchemas()}) {
    schemas.insert(schemas.end(), more.begin(), more.end());
  }
  constexpr int kWalks = 12;
  struct Walked {
    std::string what;
    uint64_t seed;
    std::string text;
  };
  std::vector<Walked> walked;
  const fs::path input = fs::path(::testing::TempDir()) / ("walks_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream lines(input);
  int compiled = 0, refused = 0, stuck = 0, oracle_rejects = 0;
  for (size_t si = 0; si < schemas.size(); ++si) {
    for (JsonLayout layout : {JsonLayout::kCompact, JsonLayout::kIndented}) {
      auto c = testing::CompileForTest(schemas[si].schema.dump(), layout);
      if (!c.ok()) {
        ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << schemas[si].name << ": " << c.status();
        if (layout == JsonLayout::kCompact) ++refused;
        break;
      }
      if (layout == JsonLayout::kCompact) ++compiled;
      auto walker = testing::Walker::Create(*c->grammar);
      ASSERT_TRUE(walker.ok()) << walker.status();
      for (int k = 0; k < kWalks; ++k) {
        const uint64_t seed = 0x5eed0000 + si * 1000 + static_cast<uint64_t>(k) * 2 + (layout == JsonLayout::kIndented);
        std::mt19937_64 rng(seed);
        auto text = walker->Walk(rng, 4 + static_cast<int>(rng() % 80));
        if (!text) {
          ++stuck;
          continue;
        }
        if (text->size() < 3000 && !c->Accepts(*text)) {
          ++oracle_rejects;
          ADD_FAILURE() << schemas[si].name << " seed " << seed << ": the walk's output is not a sentence: " << *text;
        }
        walked.push_back({schemas[si].name + (layout == JsonLayout::kIndented ? " (indented)" : ""), seed, *text});
        lines << nlohmann::json{{"schema", schemas[si].schema}, {"text", *text}}.dump() << "\n";
      }
    }
  }
  lines.close();
  const fs::path output = fs::path(::testing::TempDir()) / ("walks_" + std::to_string(::getpid()) + ".out.jsonl");
  const std::string cmd = "node " + tpserve::testing::Quote(fs::path(TPSERVE_SOURCE_DIR) / "tests/grammar/ajv_validate.js") +
                          " " + tpserve::testing::Quote(modules) + " " + tpserve::testing::Quote(input) + " > " +
                          tpserve::testing::Quote(output);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream results(output);
  std::string line;
  size_t i = 0;
  int valid = 0, invalid = 0;
  while (std::getline(results, line)) {
    if (line.empty()) continue;
    ASSERT_LT(i, walked.size());
    const auto r = nlohmann::json::parse(line);
    if (r.at("ok").get<bool>()) {
      ++valid;
    } else if (++invalid <= 25) {
      ADD_FAILURE() << walked[i].what << " seed " << walked[i].seed << ": ajv rejects " << walked[i].text << "\n  "
                    << r.at("error").get<std::string>();
    }
    ++i;
  }
  EXPECT_EQ(i, walked.size());
  std::cout << "random walks: " << schemas.size() << " schemas, " << compiled << " compiled, " << refused
            << " refused; " << walked.size() << " outputs, " << valid << " valid per ajv, " << invalid
            << " invalid; " << stuck << " walks without an output; " << oracle_rejects << " not sentences\n";
  EXPECT_EQ(invalid, 0);
  EXPECT_GT(valid, 500);
  if (std::getenv("TPSERVE_KEEP_WALKS") != nullptr) {
    std::cout << "walks kept in " << input << " and " << output << "\n";
  } else {
    fs::remove(input);
    fs::remove(output);
  }
}

}  // namespace
}  // namespace tpserve::grammar
