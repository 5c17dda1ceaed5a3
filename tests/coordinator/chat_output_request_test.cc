// The reasoning and tool calls of a chat, end to end inside the coordinator
// on Qwen3's real tokenizer and chat template (skipped with a message when
// scripts/fetch-tokenizers.sh could not fetch them): PrepareRequest picks the
// parsers from the template and the prompt, and the OutputProcessor turns the
// model's token ids into the parts a client sees.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "coordinator/output_processor.h"
#include "coordinator/request.h"
#include "tests/tokenizer/reference_env.h"
#include "tools/grammar/model_vocabulary.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;

constexpr char kTools[] =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",)"
    R"( "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

class ChatOutputRequestTest : public ::testing::Test {
 protected:
  // The tokenizer and template, loaded once for the suite (half a second each).
  static void SetUpTestSuite() {
    const std::optional<std::filesystem::path> dir = testing::RealTokenizerDir("qwen3");
    if (!dir) return;
    auto tok = Tokenizer::Load(*dir);
    if (!tok.ok()) return;
    auto chat_template = LoadChatTemplate(*dir, "auto", **tok);
    if (!chat_template.ok()) return;
    tokenizer_ = std::move(*tok).release();
    template_ = new ChatTemplate(*std::move(chat_template));
  }
  static void TearDownTestSuite() {
    delete template_;
    delete tokenizer_;
    template_ = nullptr;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) GTEST_SKIP() << testing::SkipMessage();
    limits_.vocab_size = tokenizer_->vocab_size();
    limits_.max_model_len = 4096;
  }

  static v1::GenerateRequest Chat(bool tools) {
    v1::GenerateRequest r;
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content("Weather in Paris?");
    if (tools) r.mutable_chat()->set_tools_json(kTools);
    return r;
  }
  PreparedRequest Prepare(const v1::GenerateRequest& r) {
    absl::StatusOr<PreparedRequest> p = PrepareRequest(r, *tokenizer_, *template_, limits_);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : PreparedRequest();
  }
  // The parts of `output` (as the model would write it, then <|im_end|>), fed token by token.
  OutputDelta Run(const StopParams& stop, const std::string& output) {
    std::vector<int32_t> ids = tokenizer_->Encode(output, false);
    const int32_t end = *tokenizer_->TokenToId("<|im_end|>");
    ids.push_back(end);
    StopParams params = stop;
    params.max_tokens = 1000;
    OutputProcessor proc(*tokenizer_, params, {end}, 10, 100000);
    OutputDelta all;
    for (int32_t id : ids) {
      OutputDelta d = proc.Append(id);
      all.text += d.text;
      all.reasoning += d.reasoning;
      for (ParsedToolCall& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
      all.finish = d.finish;
      if (d.finish != StopReason::kNone) break;
    }
    return all;
  }

  static Tokenizer* tokenizer_;
  static ChatTemplate* template_;
  RequestLimits limits_;
};
Tokenizer* ChatOutputRequestTest::tokenizer_ = nullptr;
ChatTemplate* ChatOutputRequestTest::template_ = nullptr;

TEST_F(ChatOutputRequestTest, TheTemplateAndPromptChooseTheParsers) {
  PreparedRequest p = Prepare(Chat(/*tools=*/true));
  EXPECT_EQ(p.stop.chat_output.tool_calls, ToolCallFormat::kHermes);
  EXPECT_EQ(p.stop.chat_output.reasoning, ReasoningFormat::kThinkTags);
  EXPECT_FALSE(p.stop.chat_output.starts_in_reasoning);
  EXPECT_EQ(Prepare(Chat(/*tools=*/false)).stop.chat_output.tool_calls, ToolCallFormat::kNone);

  v1::GenerateRequest none = Chat(true);
  none.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::NONE);
  EXPECT_EQ(Prepare(none).stop.chat_output.tool_calls, ToolCallFormat::kNone);

  v1::GenerateRequest raw = Chat(true);
  raw.set_separate_reasoning(false);
  EXPECT_EQ(Prepare(raw).stop.chat_output.reasoning, ReasoningFormat::kNone);

  // Thinking off: the prompt closes the <think> it opens, so the output starts in the answer.
  v1::GenerateRequest off = Chat(false);
  (*off.mutable_chat()->mutable_chat_template_kwargs())["enable_thinking"] = "false";
  EXPECT_FALSE(Prepare(off).stop.chat_output.starts_in_reasoning);
}

TEST_F(ChatOutputRequestTest, TokensBecomeReasoningAndACall) {
  PreparedRequest p = Prepare(Chat(true));
  OutputDelta out = Run(p.stop,
                        "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n"
                        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_EQ(out.reasoning, "The user wants the weather.");
  EXPECT_EQ(out.text, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(out.finish, StopReason::kEos);
}

TEST_F(ChatOutputRequestTest, AnAnswerWithoutCallsIsText) {
  PreparedRequest p = Prepare(Chat(true));
  OutputDelta out = Run(p.stop, "<think>\n\n</think>\n\nIt is sunny in <b>Paris</b>.");
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.text, "It is sunny in <b>Paris</b>.");
  EXPECT_TRUE(out.tool_calls.empty());
}

// Constrained output: without a grammar engine (RequestLimits::constraints)
// refused, never ignored; with one, compiled against the model's vocabulary
// and carried in the sampling parameters, with Qwen3's reasoning tokens (only
// the answer after </think> is constrained); a refused schema or an unknown
// function is INVALID_ARGUMENT naming the field.
TEST_F(ChatOutputRequestTest, ConstrainedOutputIsCompiledOrRefused) {
  v1::GenerateRequest r = Chat(true);
  r.mutable_structured_output()->set_json_object(true);
  EXPECT_FALSE(PrepareRequest(r, *tokenizer_, *template_, limits_).ok());  // no engine: refused

  ConstraintCompiler compiler([]() -> absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> {
    return GrammarVocabulary(*tokenizer_, tokenizer_->vocab_size(), {*tokenizer_->TokenToId("<|im_end|>")});
  });
  limits_.constraints = &compiler;
  r = Chat(false);
  r.mutable_structured_output()->set_json_schema(R"({"type":"object","properties":{"ok":{"type":"boolean"}}})");
  PreparedRequest p = Prepare(r);
  ASSERT_NE(p.sampling.constraint, nullptr);
  EXPECT_EQ(p.sampling.constraint->kind, OutputConstraint::Kind::kJsonSchema);
  EXPECT_EQ(p.sampling.constraint->think_start, *tokenizer_->TokenToId("<think>"));
  EXPECT_EQ(p.sampling.constraint->think_end, *tokenizer_->TokenToId("</think>"));
  EXPECT_FALSE(p.sampling.constraint->starts_in_reasoning);

  r.mutable_structured_output()->set_json_schema(R"({"type":"string","not":{"const":"a"}})");
  absl::StatusOr<PreparedRequest> got = PrepareRequest(r, *tokenizer_, *template_, limits_);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(got.status()));
  EXPECT_EQ(std::string(got.status().message()).rfind("structured_output.json_schema: ", 0), 0u) << got.status();

  r = Chat(true);
  r.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::REQUIRED);
  p = Prepare(r);
  ASSERT_NE(p.sampling.constraint, nullptr);
  EXPECT_EQ(p.sampling.constraint->kind, OutputConstraint::Kind::kToolCalls);
  EXPECT_EQ(p.sampling.constraint->tool_format, OutputConstraint::ToolFormat::kHermes);
  ASSERT_EQ(p.sampling.constraint->functions.size(), 1u);
  EXPECT_EQ(p.sampling.constraint->functions[0].name, "get_weather");
  EXPECT_TRUE(p.sampling.constraint->parallel_tool_calls);

  r.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::FUNCTION);
  r.mutable_chat()->mutable_tool_choice()->set_function_name("get_time");
  got = PrepareRequest(r, *tokenizer_, *template_, limits_);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(std::string(got.status().message()).rfind("chat.tool_choice.function_name: ", 0), 0u) << got.status();
  r.mutable_chat()->mutable_tool_choice()->set_function_name("get_weather");
  r.mutable_chat()->mutable_tool_choice()->set_parallel_tool_calls(false);
  p = Prepare(r);
  ASSERT_NE(p.sampling.constraint, nullptr);
  EXPECT_FALSE(p.sampling.constraint->parallel_tool_calls);

  // AUTO parses what the model writes: no constraint.
  r.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::AUTO);
  EXPECT_EQ(Prepare(r).sampling.constraint, nullptr);
}

}  // namespace
}  // namespace tpserve
