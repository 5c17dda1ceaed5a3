// chat_output.h: reasoning, answer and tool calls apart, the same however the
// output is cut into streamed pieces (every byte boundary is tried).
#include "chat_output/chat_output.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpserve {
namespace {

ChatOutputParts Whole(const ChatOutputOptions& options, const std::string& text) {
  ChatOutputParser p(options);
  ChatOutputParts out = p.Append(text);
  out.Add(p.Finish());
  return out;
}

// The parts of `text` streamed in pieces cut at `cuts` (byte offsets, ascending).
ChatOutputParts Streamed(const ChatOutputOptions& options, const std::string& text, const std::vector<size_t>& cuts) {
  ChatOutputParser p(options);
  ChatOutputParts out;
  size_t at = 0;
  for (size_t cut : cuts) {
    out.Add(p.Append(text.substr(at, cut - at)));
    at = cut;
  }
  out.Add(p.Append(text.substr(at)));
  out.Add(p.Finish());
  return out;
}

// Whole(text) == expected, and so is every stream cut in two and in every piece of one byte.
void ExpectParts(const ChatOutputOptions& options, const std::string& text, const ChatOutputParts& expected) {
  auto same = [&](const ChatOutputParts& got, const std::string& how) {
    EXPECT_EQ(got.reasoning, expected.reasoning) << how << "\n" << text;
    EXPECT_EQ(got.content, expected.content) << how << "\n" << text;
    EXPECT_EQ(got.tool_calls, expected.tool_calls) << how << "\n" << text;
  };
  same(Whole(options, text), "whole");
  for (size_t cut = 0; cut <= text.size(); ++cut) same(Streamed(options, text, {cut}), "cut at " + std::to_string(cut));
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  same(Streamed(options, text, bytes), "a byte at a time");
}

constexpr ChatOutputOptions kThink{.reasoning = ReasoningFormat::kThinkTags};
constexpr ChatOutputOptions kQwen{.reasoning = ReasoningFormat::kThinkTags, .tool_calls = ToolCallFormat::kHermes};
constexpr ChatOutputOptions kHermes{.tool_calls = ToolCallFormat::kHermes};
constexpr ChatOutputOptions kLlama{.tool_calls = ToolCallFormat::kLlama3Json};

TEST(ChatOutput, ReasoningApartFromTheAnswer) {
  ExpectParts(kThink, "<think>\nThe user greets.\nSo greet back.\n</think>\n\nHello!",
              {.reasoning = "The user greets.\nSo greet back.", .content = "Hello!"});
  ExpectParts(kThink, "<think>\n\n</think>\n\nHi", {.content = "Hi"});  // thinking off, as Qwen3 writes it
  ExpectParts(kThink, "  <think>x</think>y", {.reasoning = "x", .content = "y"});
  // Cut off inside the reasoning: all of it was reasoning.
  ExpectParts(kThink, "<think>\nstill thinking\n", {.reasoning = "still thinking\n"});
  // The prompt opened the reasoning (a thinking template).
  ExpectParts({.reasoning = ReasoningFormat::kThinkTags, .starts_in_reasoning = true}, "plan\n</think>\n\nanswer",
              {.reasoning = "plan", .content = "answer"});
}

TEST(ChatOutput, WithoutReasoningTheAnswerIsAsWritten) {
  ExpectParts(kThink, "Hello <thing> and </think>", {.content = "Hello <thing> and </think>"});
  ExpectParts(kThink, "<thin", {.content = "<thin"});
  ExpectParts(kThink, "\n\nHi", {.content = "\n\nHi"});
  ExpectParts({}, "<think>x</think>", {.content = "<think>x</think>"});
}

TEST(ChatOutput, HermesToolCalls) {
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n"
                           "</tool_call>";
  const ParsedToolCall weather{"get_weather", R"({"city":"Paris","days":3})"};
  ExpectParts(kHermes, call, {.tool_calls = {weather}});
  ExpectParts(kHermes, "Let me look.\n" + call, {.content = "Let me look.", .tool_calls = {weather}});
  ExpectParts(kHermes, call + "\n" + call + "\n", {.tool_calls = {weather, weather}});
  ExpectParts(kHermes, call + "\n\nDone.", {.content = "Done.", .tool_calls = {weather}});
  // Key order as the model wrote it.
  ExpectParts(kHermes, R"(<tool_call>{"name": "f", "arguments": {"z": 1, "a": [true, null]}}</tool_call>)",
              {.tool_calls = {{"f", R"({"z":1,"a":[true,null]})"}}});
}

TEST(ChatOutput, AMalformedCallIsText) {
  for (const std::string bad : {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }}</tool_call>",
                                "<tool_call>{\"arguments\": {}}</tool_call>",
                                "<tool_call>{\"name\": \"f\", \"arguments\": \"a string\"}</tool_call>",
                                "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
                                "<tool_call>[1, 2]</tool_call>"}) {
    ExpectParts(kHermes, bad, {.content = bad});
  }
  // Never closed: the output ended inside it.
  ExpectParts(kHermes, "ok <tool_call>{\"name\": \"f\"", {.content = "ok <tool_call>{\"name\": \"f\""});
  // Deeply nested arguments: refused as a call, no recursion on them.
  const std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + std::string(100000, '[') +
                           std::string(100000, ']') + "}}</tool_call>";
  EXPECT_EQ(Whole(kHermes, deep).content, deep);
  EXPECT_TRUE(Whole(kHermes, deep).tool_calls.empty());
}

TEST(ChatOutput, ReasoningThenACall) {
  ExpectParts(kQwen,
              "<think>\nNeed weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>",
              {.reasoning = "Need weather.", .tool_calls = {{"w", "{}"}}});
  // A tool call tag inside the reasoning is reasoning.
  ExpectParts(kQwen, "<think>maybe <tool_call>x</tool_call></think>ok",
              {.reasoning = "maybe <tool_call>x</tool_call>", .content = "ok"});
}

TEST(ChatOutput, Llama3JsonCalls) {
  ExpectParts(kLlama, R"({"name": "get", "parameters": {"q": "x"}})", {.tool_calls = {{"get", R"({"q":"x"})"}}});
  ExpectParts(kLlama, R"(<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"n": 2}})",
              {.tool_calls = {{"a", "{}"}, {"b", R"({"n":2})"}}});
  ExpectParts(kLlama, "  \n{\"name\": \"a\", \"arguments\": {}}", {.tool_calls = {{"a", "{}"}}});
  ExpectParts(kLlama, "The answer is 4.", {.content = "The answer is 4."});
  ExpectParts(kLlama, R"({"name": "a", "parameters": {}} and more)",
              {.content = R"({"name": "a", "parameters": {}} and more)"});
  ExpectParts(kLlama, "{not json", {.content = "{not json"});
  ExpectParts(kLlama, R"({"x": "}"})", {.content = R"({"x": "}"})"});
}

TEST(ChatOutput, PartialTagSuffix) {
  EXPECT_EQ(PartialTagSuffix("abc <tool", "<tool_call>"), 5u);
  EXPECT_EQ(PartialTagSuffix("abc", "<tool_call>"), 0u);
  EXPECT_EQ(PartialTagSuffix("<tool_call>", "<tool_call>"), 0u) << "a whole tag is not a partial one";
  EXPECT_EQ(PartialTagSuffix("<", "<think>"), 1u);
}

}  // namespace
}  // namespace tpserve
