// Constrained output end to end: coordinator + spawned worker + tpserve-http on
// a random-weight Qwen3-shaped model whose chat template teaches Hermes tool
// calls. Over gRPC: structured_output gives output the grammar allows, many
// constrained and free requests at once all finish, and a schema the engine
// refuses is INVALID_ARGUMENT while the server keeps serving. Over HTTP,
// through the official `openai` npm client (constrained_openai_client.cjs):
// response_format, structured_outputs, tool_choice required / named / auto /
// none, parallel calls, streaming, finish_reason "tool_calls", 400 for hostile
// schemas. The client part skips when npm cannot fetch the package.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ChatML with Qwen2.5's tool section (the parts ChatOutputOf and the
// coordinator read: "<tool_call>" in the source picks the Hermes format).
constexpr char kHermesTemplate[] = R"TPL({%- if tools %}<|im_start|>system
# Tools

You may call one or more functions to assist with the user query.

<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %})TPL";

class ConstrainedHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    model_ = MakeModel(dir_->path(), "qwen3", {"--seed", "5"});
    const std::string tpl = dir_->path() + "/hermes.jinja";
    std::ofstream(tpl) << kHermesTemplate;
    coordinator_ = new Coordinator(StartCoordinator(model_, 1, dir_->path() + "/coordinator.log",
                                                    {"--chat-template", tpl}));
    if (coordinator_->process == nullptr) return;
    http_ = StartHttp(coordinator_->address, {}, dir_->path() + "/http.log", &base_).release();
  }
  static void TearDownTestSuite() {
    delete http_;
    delete coordinator_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(coordinator_->process, nullptr) << "the coordinator did not start";
    ASSERT_FALSE(base_.empty()) << "tpserve-http did not start:\n" << http_->Log();
  }

  static v1::GenerateRequest Regex(const std::string& re, uint64_t seed) {
    v1::GenerateRequest r;
    r.set_prompt("The code is");
    r.mutable_structured_output()->set_regex(re);
    r.mutable_sampling()->set_seed(seed);
    r.mutable_stopping()->set_max_tokens(64);
    return r;
  }

  static TempDir* dir_;
  static std::string model_;
  static Coordinator* coordinator_;
  static Process* http_;
  static std::string base_;
};
TempDir* ConstrainedHttpTest::dir_ = nullptr;
std::string ConstrainedHttpTest::model_;
Coordinator* ConstrainedHttpTest::coordinator_ = nullptr;
Process* ConstrainedHttpTest::http_ = nullptr;
std::string ConstrainedHttpTest::base_;

// Constrained and free requests at once (one batch, the overlapped
// pipeline): every constrained output that ended is in the regex's language
// and ends with EOS; the free ones are untouched.
TEST_F(ConstrainedHttpTest, ConstrainedAndFreeRequestsTogether) {
  const std::string re = "[0-9]{3}-[a-z]{2}";
  std::vector<GenerateOutcome> outs(16);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < outs.size(); ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest r = Regex(re, 100 + i);
      if (i % 2 == 1) r.clear_structured_output();
      outs[i] = Generate(*coordinator_->stub, r);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    if (i % 2 == 1) continue;
    EXPECT_EQ(outs[i].complete.finish_reason(), v1::EOS) << i << ": " << outs[i].text;
    EXPECT_TRUE(std::regex_match(outs[i].text, std::regex(re))) << i << ": " << outs[i].text;
  }
}

// A schema the engine refuses is INVALID_ARGUMENT naming the field, and the
// server goes on serving.
TEST_F(ConstrainedHttpTest, RefusedSchemaIsInvalidArgument) {
  v1::GenerateRequest r = Regex("x", 1);
  r.mutable_structured_output()->set_json_schema(R"({"type":"string","not":{"const":"a"}})");
  GenerateOutcome bad = Generate(*coordinator_->stub, r);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.status.error_message().rfind("structured_output.json_schema: ", 0), 0u) << bad.status.error_message();
  GenerateOutcome good = Generate(*coordinator_->stub, Regex("(yes|no)", 2));
  ASSERT_TRUE(good.status.ok()) << good.status.error_message();
  EXPECT_TRUE(good.text == "yes" || good.text == "no") << good.text;
}

TEST_F(ConstrainedHttpTest, OpenAiClientSeesValidOutputAndToolCalls) {
  const std::string module = OpenAiModule(dir_->path() + "/npm.log");
  if (module.empty()) {
    GTEST_SKIP() << "the openai npm client is not installed and npm could not fetch it:\n"
                 << ReadFile(dir_->path() + "/npm.log");
  }
  const std::string log = dir_->path() + "/node.log";
  const int status = RunCommand({"env", "OPENAI_MODULE=" + module, "HTTP_BASE=" + base_ + "/v1", "MODEL=" + std::filesystem::path(model_).filename().string(),
                                 "node", std::string(TPSERVE_SOURCE_DIR) + "/tests/e2e/constrained_openai_client.cjs"},
                                log);
  std::cout << ReadFile(log);
  EXPECT_EQ(status, 0) << ReadFile(log);
}

}  // namespace
}  // namespace tpserve::e2e
