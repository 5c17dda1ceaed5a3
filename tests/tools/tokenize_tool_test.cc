// tpserve-tokenize run as a real process on the toy tokenizer.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/toy_tokenizer.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ToolRun {
  int exit_code;
  std::vector<json> lines;  // stdout, one JSON value per line
  std::string err;
};

class TokenizeTool : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("tokenize_tool_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "tokenizer.json") << testing::ToyTokenizerJson().dump();
  }
  void TearDown() override { fs::remove_all(dir_); }

  ToolRun Tool(const std::string& input, const std::string& model) {
    std::ofstream(dir_ / "in.jsonl", std::ios::binary) << input;
    const std::string cmd = std::string(TPSERVE_BINARY_DIR) + "/tools/tokenize/tpserve-tokenize --model '" + model +
                            "' < '" + (dir_ / "in.jsonl").string() + "' > '" + (dir_ / "out.jsonl").string() +
                            "' 2> '" + (dir_ / "err.txt").string() + "'";
    const int status = std::system(cmd.c_str());
    ToolRun run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, {}, {}};
    std::ifstream out(dir_ / "out.jsonl");
    std::string line;
    while (std::getline(out, line)) run.lines.push_back(json::parse(line));
    std::stringstream err;
    err << std::ifstream(dir_ / "err.txt").rdbuf();
    run.err = err.str();
    return run;
  }

  fs::path dir_;
};

TEST_F(TokenizeTool, EncodesAndDecodes) {
  const ToolRun r = Tool(
      "{\"text\": \"abc\"}\n"
      "{\"text\": \"abc\", \"add_special_tokens\": false}\n"
      "\n"
      "{\"ids\": [300, 258, 305]}\n"
      "{\"ids\": [300, 258, 305], \"skip_special_tokens\": true}\n"
      "{\"text\": \"\xF0\x9F\x98\x80 t\"}\n",
      dir_.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 5u);
  EXPECT_EQ(r.lines[0], json::parse(R"({"ids": [300, 258]})"));
  EXPECT_EQ(r.lines[1], json::parse(R"({"ids": [258]})"));
  EXPECT_EQ(r.lines[2], json::parse(R"({"text": "<|s|>abc<think>"})"));
  EXPECT_EQ(r.lines[3], json::parse(R"({"text": "abc<think>"})"));
  EXPECT_EQ(r.lines[4], json::parse(R"({"ids": [300, 262, 263, 261]})"));
}

TEST_F(TokenizeTool, BadLinesGetAnErrorAndTheToolGoesOn) {
  const ToolRun r = Tool(
      "{\"text\": \n"                                // bad JSON
      "[1, 2]\n"                                     // not an object
      "{\"text\": \"a\", \"colour\": \"red\"}\n"     // unknown key
      "{\"ids\": [1], \"add_special_tokens\": true}\n"  // key of the other kind
      "{\"text\": \"a\", \"ids\": [1]}\n"            // both
      "{}\n"                                         // neither
      "{\"ids\": [97, 99999]}\n"                     // invalid id
      "{\"ids\": [97, -1]}\n"                        // negative id
      "{\"ids\": [\"a\"]}\n"                         // not an integer
      "{\"text\": 5}\n"                              // not a string
      "{\"text\": \"a\", \"add_special_tokens\": \"yes\"}\n"
      "{\"text\": \"abc\", \"add_special_tokens\": false}\n",  // still served
      dir_.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 12u);
  for (size_t i = 0; i + 1 < r.lines.size(); ++i) {
    ASSERT_TRUE(r.lines[i].contains("error")) << i << ": " << r.lines[i].dump();
    EXPECT_EQ(r.lines[i].size(), 1u);
  }
  EXPECT_NE(r.lines[2]["error"].get<std::string>().find("colour"), std::string::npos);
  EXPECT_NE(r.lines[6]["error"].get<std::string>().find("99999"), std::string::npos);
  EXPECT_NE(r.lines[7]["error"].get<std::string>().find("-1"), std::string::npos);
  EXPECT_EQ(r.lines.back(), json::parse(R"({"ids": [258]})"));
}

TEST_F(TokenizeTool, MissingModelFailsWithAMessage) {
  const ToolRun r = Tool("{\"text\": \"a\"}\n", (dir_ / "nope").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.lines.empty());
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tpserve
