// tpserve-grammar run as a real process on the toy tokenizer: --json's
// figures, where a text is rejected, and the exit status of each outcome.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/toy_tokenizer.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class GrammarTool : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("grammar_tool_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "tokenizer.json") << testing::ToyTokenizerJson().dump();
    std::ofstream(dir_ / "tokenizer_config.json") << R"({"eos_token": "<|e|>"})";
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }

  // Runs the tool with `args`; returns its exit status and stdout.
  std::pair<int, std::string> Run(const std::string& args) {
    const std::string cmd = std::string(TPSERVE_BINARY_DIR) + "/tools/grammar/tpserve-grammar --model '" +
                            dir_.string() + "' " + args + " > '" + (dir_ / "out").string() + "' 2>/dev/null";
    const int status = std::system(cmd.c_str());
    std::stringstream out;
    out << std::ifstream(dir_ / "out").rdbuf();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out.str()};
  }

  fs::path dir_;
};

TEST_F(GrammarTool, ReportsAcceptedAndRejectedTextsAsJson) {
  const fs::path good = Write("good.txt", "ab-123"), early = Write("early.txt", "ab-12x"),
                 short_text = Write("short.txt", "ab-1");
  const auto [code, out] = Run("--regex '[a-z]+-[0-9]{3}' --json --check " + good.string() + "," + early.string() +
                               " " + short_text.string());
  EXPECT_EQ(code, 1) << out;  // a check was rejected
  const json report = json::parse(out);
  EXPECT_EQ(report["kind"], "regex");
  EXPECT_GE(report["compile_ms"].get<double>(), 0.0);
  ASSERT_EQ(report["checks"].size(), 3u) << out;
  const json& ok = report["checks"][0];
  EXPECT_TRUE(ok["accepted"].get<bool>()) << out;
  EXPECT_EQ(ok["mask_us"]["count"].get<int>(), ok["tokens"].get<int>() + 1);  // one mask per token, one for the end
  for (const char* q : {"p50", "p99", "max"}) EXPECT_GE(ok["mask_us"][q].get<double>(), 0.0);
  const json& bad = report["checks"][1];
  EXPECT_FALSE(bad["accepted"].get<bool>());
  EXPECT_EQ(bad["rejected"]["reason"], "token not allowed");
  EXPECT_EQ(bad["rejected"]["byte_offset"].get<int>() + bad["rejected"]["token"].get<std::string>().size(), 6u)
      << "the last byte, 'x', is what is refused: " << out;
  const json& incomplete = report["checks"][2];
  EXPECT_FALSE(incomplete["accepted"].get<bool>());
  EXPECT_EQ(incomplete["rejected"]["token_index"], incomplete["tokens"]);
}

TEST_F(GrammarTool, JsonSchemaChecks) {
  const fs::path schema = Write("schema.json", R"({"type":"object","properties":{"a":{"type":"integer","minimum":0}},)"
                                               R"("required":["a"],"additionalProperties":false})");
  const fs::path good = Write("good.json", R"({"a":12})"), wrong = Write("wrong.json", R"({"a":-1})"),
                 extra = Write("extra.json", R"({"a":1,"b":2})"), open = Write("open.json", R"({"a":1)");
  const auto [code, out] = Run("--json-schema " + schema.string() + " --json --check " + good.string() + " " +
                               wrong.string() + " " + extra.string() + " " + open.string());
  EXPECT_EQ(code, 1) << out;
  const json report = json::parse(out);
  EXPECT_EQ(report["kind"], "json-schema");
  ASSERT_EQ(report["checks"].size(), 4u) << out;
  EXPECT_TRUE(report["checks"][0]["accepted"].get<bool>()) << out;
  // Where each is refused: the byte that breaks the schema lies in the refused token.
  for (const auto& [index, byte] : std::vector<std::pair<int, size_t>>{{1, 5}, {2, 6}}) {
    const json& r = report["checks"][index]["rejected"];
    ASSERT_FALSE(report["checks"][index]["accepted"].get<bool>()) << out;
    const size_t begin = r["byte_offset"].get<size_t>(), end = begin + r["token"].get<std::string>().size();
    EXPECT_TRUE(begin <= byte && byte < end) << index << ": " << out;
  }
  const json& incomplete = report["checks"][3];
  EXPECT_FALSE(incomplete["accepted"].get<bool>());
  EXPECT_EQ(incomplete["rejected"]["reason"], "the end is not allowed: the output is incomplete") << out;
  const fs::path refused = Write("refused.json", R"({"type":"object","patternProperties":{"^x":{}}})");
  const auto [refused_code, refused_out] = Run("--json-schema " + refused.string() + " --json");
  EXPECT_EQ(refused_code, 2) << refused_out;
  EXPECT_NE(json::parse(refused_out)["error"].get<std::string>().find("patternProperties"), std::string::npos)
      << refused_out;
}

TEST_F(GrammarTool, TextOutputAndExitStatus) {
  const fs::path yes = Write("yes.txt", "yes");
  auto [code, out] = Run("--choice yes,no " + yes.string());
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("compiled choice in"), std::string::npos) << out;
  EXPECT_NE(out.find("accepted"), std::string::npos) << out;
  const fs::path gbnf = Write("g.gbnf", "root ::= \"(\" root \")\" | \"x\"\n");
  std::tie(code, out) = Run("--ebnf " + gbnf.string() + " --dump " + Write("nested.txt", "((x))").string());
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("root (start) ::="), std::string::npos) << out;
  const fs::path broken = Write("broken.gbnf", "root ::= (\"x\"\n");
  std::tie(code, out) = Run("--ebnf " + broken.string() + " --json");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(json::parse(out)["error"].get<std::string>().find("line 1, column 10"), std::string::npos) << out;
  std::tie(code, out) = Run("--regex a --choice a");
  EXPECT_EQ(code, 2);
}

}  // namespace
}  // namespace tpserve
