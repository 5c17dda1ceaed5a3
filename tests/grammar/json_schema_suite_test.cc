// The official JSON Schema Test Suite (the npm package json-schema-test-suite,
// fetched by scripts/fetch-json-schema-suite.sh; it carries drafts 3 and 4,
// and this test runs draft 4 with its optional tests). Every schema is given
// "$schema": draft-04 (the suite's schemas leave it out; it selects draft 4's
// $ref, which ignores its siblings). For every schema that compiles, each
// valid instance must be accepted in some order of its members and each
// invalid one rejected in every order (json_schema_instances.h says how
// instances are written). Schemas that do not compile are counted and listed
// with the refused keyword, never hidden. Skips with a message without the
// package.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_split.h"
#include "tests/grammar/json_schema_instances.h"
#include "tests/grammar/json_schema_test_util.h"
#include "tests/tokenizer/reference_env.h"

namespace tpserve::grammar {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// Valid instances the grammar rejects on purpose, each with its reason. Only
// a documented restriction may stand here; an invalid instance accepted never may.
const std::map<std::string, std::string>& KnownRestrictions() {
  static const auto* known = new std::map<std::string, std::string>{
      {"optional/format.json / validation of URIs / a valid protocol-relative URI",
       "format uri is RFC 3986's URI, with a scheme; later suite versions call this instance an invalid URI "
       "(it is a URI reference)"},
  };
  return *known;
}

fs::path SuiteDir() { return tpserve::testing::NodeModules() / "json-schema-test-suite" / "tests" / "draft4"; }

// "properties.foo.not: not supported" -> "not"; the keyword a refusal names.
std::string RefusedKeyword(const std::string& message) {
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return message.substr(0, 60);
  std::string path = message.substr(0, colon);
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  std::string last = parts.back();
  if (message.find("only references within the schema") != std::string::npos) return "$ref (remote)";
  if (message.find("oneOf") != std::string::npos && last != "oneOf") return "oneOf";
  return last.empty() ? message.substr(0, 60) : last;
}

TEST(JsonSchemaSuiteTest, Draft4) {
  if (!fs::exists(SuiteDir())) {
    GTEST_SKIP() << "the JSON Schema Test Suite is not under " << SuiteDir()
                 << ": run scripts/fetch-json-schema-suite.sh (needs npm and the npm registry)";
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(SuiteDir())) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  int groups = 0, compiled = 0, refused = 0;
  int valid_accepted = 0, valid_rejected = 0, invalid_rejected = 0, invalid_accepted = 0, capped = 0;
  std::vector<std::string> restricted;
  std::map<std::string, int> refused_by_keyword;
  std::vector<std::string> refusals, failures;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    const json suite = json::parse(in);
    const std::string name = fs::relative(file, SuiteDir()).string();
    for (const json& group : suite) {
      ++groups;
      json schema = group.at("schema");
      if (schema.is_object() && !schema.contains("$schema")) {
        schema["$schema"] = "http://json-schema.org/draft-04/schema#";
      }
      const std::string where = name + " / " + group.at("description").get<std::string>();
      auto c = testing::CompileForTest(schema.dump());
      if (!c.ok()) {
        ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << where << ": " << c.status();
        ++refused;
        const std::string message(c.status().message());
        ++refused_by_keyword[RefusedKeyword(message)];
        refusals.push_back(where + ": " + message);
        continue;
      }
      ++compiled;
      for (const json& test : group.at("tests")) {
        bool complete = true;
        const bool accepted = testing::AnyOrderAccepted(
            test.at("data"), [&](const std::string& s) { return c->Accepts(s); }, &complete);
        if (!complete) ++capped;
        const bool valid = test.at("valid").get<bool>();
        const std::string what = where + " / " + test.at("description").get<std::string>() + ": " +
                                 testing::WriteScalar(test.at("data"));
        if (valid && accepted) ++valid_accepted;
        if (!valid && !accepted) ++invalid_rejected;
        const std::string key = where + " / " + test.at("description").get<std::string>();
        if (valid && !accepted && KnownRestrictions().contains(key)) {
          restricted.push_back(what + " (" + KnownRestrictions().at(key) + ")");
        } else if (valid && !accepted) {
          ++valid_rejected;
          failures.push_back("valid instance rejected: " + what);
        }
        if (!valid && accepted) {
          ++invalid_accepted;
          failures.push_back("INVALID INSTANCE ACCEPTED: " + what);
        }
      }
    }
  }
  std::ostringstream report;
  report << "JSON Schema Test Suite draft 4 (with optional): " << groups << " schemas, " << compiled
         << " compiled exactly, " << refused << " refused\n"
         << "  instances of compiled schemas: valid accepted " << valid_accepted << ", valid rejected "
         << valid_rejected << ", invalid rejected " << invalid_rejected << ", invalid accepted " << invalid_accepted
         << (capped ? ", orderings capped " + std::to_string(capped) : "") << "\n";
  for (const std::string& r : restricted) report << "  valid, rejected by a documented restriction: " << r << "\n";
  report << "  refused keywords:\n";
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [k, n] : refused_by_keyword) by_count.emplace_back(-n, k);
  std::sort(by_count.begin(), by_count.end());
  for (const auto& [n, k] : by_count) report << "    " << -n << "\t" << k << "\n";
  report << "  refusals:\n";
  for (const std::string& r : refusals) report << "    " << r << "\n";
  std::cout << report.str();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(invalid_accepted, 0);
  EXPECT_EQ(valid_rejected, 0);
  EXPECT_GT(compiled, groups / 2) << "most of the suite's schemas compile";
}

}  // namespace
}  // namespace tpserve::grammar
