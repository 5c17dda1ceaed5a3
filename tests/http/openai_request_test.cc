// http/openai_request.h: every OpenAI field lands in its GenerateRequest
// field, and bad bodies are INVALID_ARGUMENT naming the field (as message
// prefix and as the `param` OpenAI clients show).
#include "http/openai_request.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;

OpenAiRequest Parse(Endpoint endpoint, const std::string& body) {
  absl::StatusOr<OpenAiRequest> r = ParseRequest(endpoint, body);
  EXPECT_TRUE(r.ok()) << body << ": " << r.status();
  return r.ok() ? *r : OpenAiRequest();
}

// The field a refused body is blamed on (and that the message starts with it).
std::string Refused(Endpoint endpoint, const std::string& body) {
  absl::StatusOr<OpenAiRequest> r = ParseRequest(endpoint, body);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  std::optional<std::string> param = OpenAiParam(r.status(), endpoint);
  if (!param) return "(none): " + std::string(r.status().message());
  EXPECT_TRUE(absl::StartsWith(r.status().message(), *param + ": ")) << r.status();
  return *param;
}

constexpr Endpoint kChat = Endpoint::kChatCompletions;
constexpr Endpoint kCompl = Endpoint::kCompletions;

TEST(OpenAiRequest, ChatMapsEveryField) {
  const OpenAiRequest r = Parse(kChat, R"({
    "model": "m", "stream": true, "stream_options": {"include_usage": true},
    "messages": [{"role": "system", "content": "be brief"},
                 {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
                 {"role": "assistant", "content": null, "reasoning_content": "hmm",
                  "tool_calls": [{"id": "c1", "type": "function",
                                  "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "2"}],
    "max_completion_tokens": 7, "min_tokens": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
    "min_p": 0.05, "seed": 11, "stop": ["a", "b"], "stop_token_ids": [3], "presence_penalty": 0.25,
    "frequency_penalty": 0.5, "repetition_penalty": 1.1, "logprobs": true, "top_logprobs": 3, "n": 1,
    "user": "u", "ignore_eos": true, "tools": [{"type": "function", "function": {"name": "f"}}],
    "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": false}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  const v1::GenerateRequest& g = r.grpc;
  ASSERT_TRUE(g.has_chat());
  ASSERT_EQ(g.chat().messages_size(), 4);
  EXPECT_TRUE(g.chat().add_generation_prompt());
  EXPECT_EQ(g.chat().messages(1).content(), "hi there");
  EXPECT_EQ(g.chat().messages(2).reasoning_content(), "hmm");
  ASSERT_EQ(g.chat().messages(2).tool_calls_size(), 1);
  EXPECT_EQ(g.chat().messages(2).tool_calls(0).name(), "f");
  EXPECT_EQ(g.chat().messages(2).tool_calls(0).arguments(), "{\"a\":1}");
  EXPECT_EQ(g.chat().messages(3).tool_call_id(), "c1");
  EXPECT_EQ(g.chat().messages(3).name(), "f");
  EXPECT_EQ(g.chat().tools_json(), R"([{"type":"function","function":{"name":"f"}}])");  // as written
  EXPECT_EQ(g.chat().chat_template_kwargs().at("enable_thinking"), "false");
  EXPECT_EQ(g.stopping().max_tokens(), 7u);
  EXPECT_EQ(g.stopping().min_tokens(), 2u);
  EXPECT_EQ(g.stopping().stop_size(), 2);
  EXPECT_EQ(g.stopping().stop_token_ids(0), 3u);
  EXPECT_TRUE(g.stopping().ignore_eos());
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_EQ(g.sampling().seed(), 11u);
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.25f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().repetition_penalty(), 1.1f);
  EXPECT_EQ(g.logprobs(), 3u);
  EXPECT_TRUE(g.skip_special_tokens());
}

TEST(OpenAiRequest, CompletionPromptsAndDefaults) {
  OpenAiRequest r = Parse(kCompl, R"({"prompt": "hello"})");
  EXPECT_EQ(r.grpc.prompt(), "hello");
  EXPECT_EQ(r.grpc.stopping().max_tokens(), 16u) << "OpenAI's completions default";
  EXPECT_FALSE(r.grpc.sampling().has_temperature()) << "unset stays the server's default";
  EXPECT_FALSE(r.grpc.has_logprobs());
  EXPECT_FALSE(r.stream);
  r = Parse(kCompl, R"({"prompt": ["one"], "max_tokens": 3})");
  EXPECT_EQ(r.grpc.prompt(), "one");
  EXPECT_EQ(r.grpc.stopping().max_tokens(), 3u);
  r = Parse(kCompl, R"({"prompt": [1, 2, 3], "logprobs": 0, "stop": "x", "seed": -1})");
  ASSERT_EQ(r.grpc.prompt_token_ids().ids_size(), 3);
  EXPECT_EQ(r.grpc.prompt_token_ids().ids(2), 3u);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.grpc.logprobs(), 0u);
  EXPECT_EQ(r.grpc.stopping().stop(0), "x");
  EXPECT_EQ(r.grpc.sampling().seed(), ~uint64_t{0}) << "a negative seed keeps its bits";
  EXPECT_EQ(Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}], "n": 3})").grpc.n(), 3u);
  EXPECT_EQ(Parse(kCompl, R"({"prompt": "x", "n": 2, "best_of": 1})").grpc.n(), 2u);
  // A list of prompts: one call each (texts and token ids may mix).
  r = Parse(kCompl, R"({"prompt": ["one", [7, 8], "three"], "n": 2})");
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.grpc.prompt(), "one");
  EXPECT_EQ(r.prompts[1].prompt_token_ids().ids_size(), 2);
  EXPECT_EQ(r.prompts[2].prompt(), "three");
  EXPECT_EQ(r.grpc.n(), 2u);
  r = Parse(kCompl, R"({"prompt": [[4, 5]], "temperature": null, "echo": false})");
  EXPECT_TRUE(r.prompts.empty()) << "a list of one is the one prompt";
  EXPECT_EQ(r.grpc.prompt_token_ids().ids_size(), 2);
  EXPECT_FALSE(r.grpc.sampling().has_temperature()) << "null is absent";
}

TEST(OpenAiRequest, ChatLogprobsWithoutAlternatives) {
  const OpenAiRequest r = Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})");
  EXPECT_TRUE(r.logprobs);
  EXPECT_TRUE(r.grpc.has_logprobs());
  EXPECT_EQ(r.grpc.logprobs(), 0u);
  EXPECT_FALSE(r.grpc.stopping().has_max_tokens()) << "chat: up to the model's length";
}

TEST(OpenAiRequest, ToolChoiceNoneDropsTheTools) {
  const OpenAiRequest r = Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})");
  EXPECT_TRUE(r.grpc.chat().tools_json().empty());
}

// 80,000 levels of `tools` or `chat_template_kwargs` once crashed tpserve-http
// (the recursive dump() overflowed the stack): refused before any value exists.
TEST(OpenAiRequest, DeepNestingIsRefusedBeforeItIsParsed) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  for (int depth : {kMaxJsonDepth, 80000}) {
    const std::string deep = std::string(depth, '[') + std::string(depth, ']');
    const std::string kwargs = [depth] {
      std::string s;
      for (int i = 0; i < depth; ++i) s += "{\"a\": ";
      return s + "1" + std::string(depth, '}');
    }();
    for (const std::string& body : {"{" + msgs + ", \"tools\": " + deep + "}",
                                    "{" + msgs + ", \"chat_template_kwargs\": " + kwargs + "}"}) {
      absl::StatusOr<OpenAiRequest> r = ParseRequest(kChat, body);
      ASSERT_FALSE(r.ok()) << depth;
      EXPECT_EQ(r.status().message(), absl::StrCat("the body nests deeper than ", kMaxJsonDepth,
                                                   " levels of arrays and objects"))
          << depth;
    }
  }
  // The deepest body allowed: the body object, tools, then a schema 126 deep.
  const std::string ok_tools = std::string(kMaxJsonDepth - 2, '[') + std::string(kMaxJsonDepth - 2, ']');
  absl::StatusOr<OpenAiRequest> r = ParseRequest(kChat, "{" + msgs + ", \"tools\": " + ok_tools + "}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grpc.chat().tools_json(), ok_tools);
}

// A key twice in one object (last-wins in nlohmann, first-wins elsewhere) is refused.
TEST(OpenAiRequest, DuplicateKeysAreRefused) {
  absl::StatusOr<OpenAiRequest> r = ParseRequest(kCompl, R"({"prompt": "a", "max_tokens": 1, "max_tokens": 900})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "the body repeats the key \"max_tokens\" in one object; give each once");
  r = ParseRequest(kChat, R"({"messages": [{"role": "user", "role": "system", "content": "x"}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"role\""), absl::string_view::npos) << r.status();
  // The same key in two objects is fine.
  r = ParseRequest(kChat, R"({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]})");
  EXPECT_TRUE(r.ok()) << r.status();
}

// tools with tool_choice and parallel_tool_calls, response_format, vLLM's
// structured_outputs, separate_reasoning: what reaches the gRPC request.
TEST(OpenAiRequest, AgentFields) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  absl::StatusOr<OpenAiRequest> r = ParseRequest(kChat, "{" + msgs + ", " + tools + R"(, "tool_choice": "required",
                                                 "parallel_tool_calls": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grpc.chat().tool_choice().mode(), v1::ToolChoice::REQUIRED);
  EXPECT_FALSE(r->grpc.chat().tool_choice().parallel_tool_calls());
  r = ParseRequest(kChat, "{" + msgs + ", " + tools +
                              R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grpc.chat().tool_choice().mode(), v1::ToolChoice::FUNCTION);
  EXPECT_EQ(r->grpc.chat().tool_choice().function_name(), "f");
  r = ParseRequest(kChat, "{" + msgs + ", " + tools + R"(, "tool_choice": "none"})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->grpc.chat().tools_json().empty());

  r = ParseRequest(kChat, "{" + msgs + R"(, "response_format": {"type": "json_schema", "json_schema":
                                          {"name": "n", "schema": {"type": "object"}, "strict": true}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grpc.structured_output().json_schema(), R"({"type":"object"})");
  // Schemas and tools reach the coordinator in the order they were written
  // (a schema's property order is its output's member order), not sorted.
  r = ParseRequest(kChat, "{" + msgs + R"(, "response_format": {"type": "json_schema", "json_schema":
                     {"name": "n", "schema": {"type": "object", "properties": {"zeta": {}, "alpha": {}}}}},
                     "tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grpc.structured_output().json_schema(), R"({"type":"object","properties":{"zeta":{},"alpha":{}}})");
  EXPECT_EQ(r->grpc.chat().tools_json(), R"([{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2}}}])");
  r = ParseRequest(kChat, "{" + msgs + R"(, "structured_outputs": {"json": {"required": ["b", "a"], "type": "object"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grpc.structured_output().json_schema(), R"({"required":["b","a"],"type":"object"})");
  r = ParseRequest(kChat, "{" + msgs + R"(, "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->grpc.structured_output().json_object());
  r = ParseRequest(kChat, "{" + msgs + R"(, "response_format": {"type": "text"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->grpc.has_structured_output());
  r = ParseRequest(kCompl, R"({"prompt": "x", "structured_outputs": {"choice": ["yes", "no"]}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grpc.structured_output().choice().choices_size(), 2);
  r = ParseRequest(kCompl, R"({"prompt": "x", "structured_outputs": {"regex": "[0-9]+"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->grpc.structured_output().regex(), "[0-9]+");
  r = ParseRequest(kChat, "{" + msgs + R"(, "separate_reasoning": false})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->grpc.separate_reasoning());

  EXPECT_EQ(Refused(kChat, "{" + msgs + R"(, "tool_choice": "required"})"), "tool_choice") << "no tools";
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", " + tools + R"(, "tool_choice": "always"})"), "tool_choice");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", " + tools + R"(, "tool_choice": {"type": "function"}})"), "tool_choice");
  EXPECT_EQ(Refused(kChat, "{" + msgs + R"(, "response_format": {"type": "xml"}})"), "response_format.type");
  EXPECT_EQ(Refused(kChat, "{" + msgs + R"(, "response_format": {"type": "json_schema"}})"),
            "response_format.json_schema");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["b"]}})"),
            "structured_outputs");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "structured_outputs": {"xml": "a"}})"), "structured_outputs.xml");
}

TEST(OpenAiRequest, BadBodiesNameTheField) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(Refused(kChat, "{\"messages\": [}"),
            "(none): the body is not valid JSON (byte 15: syntax error while parsing value - unexpected '}'; "
            "expected '[', '{', or a literal)");
  EXPECT_EQ(Refused(kChat, "[1]"), "(none): the body must be a JSON object");
  EXPECT_EQ(Refused(kChat, "{}"), "messages");
  // Fields that belong to the chat (tools, template arguments) without the
  // conversation itself (found by fuzz_openai_request).
  EXPECT_EQ(Refused(kChat, R"({"tools": [], "chat_template_kwargs": {"enable_thinking": false}})"), "messages");
  EXPECT_EQ(Refused(kChat, R"({"tools": [{"type": "function", "function": {"name": "f"}}]})"), "messages");
  EXPECT_EQ(Refused(kCompl, "{}"), "prompt");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"temprature\": 1}"), "temprature");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"temperature\": \"hot\"}"), "temperature");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"temperature\": true}"), "temperature");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"max_tokens\": -1}"), "max_tokens");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"max_tokens\": 1.5}"), "max_tokens");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"max_tokens\": 2, \"max_completion_tokens\": 3}"),
            "max_tokens") << "the later key (JSON objects are read in key order)";
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"n\": 129}"), "n");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"n\": 0}"), "n");
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": \"x\", \"best_of\": 2}"), "best_of");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"stop\": [1]}"), "stop[0]");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"stream\": 1}"), "stream");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"stream_options\": {\"include_usage\": true}}"), "stream_options");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"stream_options\": {\"x\": 1}, \"stream\": true}"), "stream_options.x");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"top_logprobs\": 2}"), "top_logprobs");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"tool_choice\": \"required\"}"), "tool_choice");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"seed\": 1e3}"), "seed");
  EXPECT_EQ(Refused(kChat, "{" + msgs + ", \"temperature\": 1e300}"), "temperature");
  EXPECT_EQ(Refused(kChat, "{\"messages\": []}"), "messages");
  EXPECT_EQ(Refused(kChat, "{\"messages\": [{\"content\": \"x\"}]}"), "messages[0].role");
  EXPECT_EQ(Refused(kChat, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}"), "messages[0].content");
  EXPECT_EQ(Refused(kChat, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}"),
            "messages[0].content[0].type");
  EXPECT_EQ(Refused(kChat, "{\"messages\": [{\"role\": \"user\", \"colour\": \"x\"}]}"), "messages[0].colour");
  EXPECT_EQ(Refused(kChat, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": 1}]}]}"),
            "messages[0].tool_calls[0].function");
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": 5}"), "prompt");
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": [\"a\", 5]}"), "prompt[1]");
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": [[1], [2, -1]]}"), "prompt[1][1]");
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": [1, -2]}"), "prompt[1]");
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": [1, 4294967296]}"), "prompt[1]");
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": \"x\", \"prompt_logprobs\": -1}"), "prompt_logprobs");
  EXPECT_EQ(Refused(kChat, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"echo\": true}"), "echo")
      << "echo is a completions field";
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": \"x\", \"messages\": []}"), "messages") << "a chat field on completions";
  EXPECT_EQ(Refused(kCompl, "{\"prompt\": \"x\", \"logprobs\": true}"), "logprobs");
}

// echo: the prompt's log-probs asked with logprobs' alternatives (0 without
// logprobs); max_tokens 0 asks for one token the response drops; vLLM's
// prompt_logprobs on both endpoints.
TEST(OpenAiRequest, EchoAndPromptLogprobs) {
  OpenAiRequest r = Parse(kCompl, R"({"prompt": "x", "echo": true, "logprobs": 2, "max_tokens": 0})");
  EXPECT_TRUE(r.echo && r.echo_only && r.logprobs && !r.prompt_logprobs);
  EXPECT_EQ(r.grpc.prompt_logprobs(), 2u);
  EXPECT_EQ(r.grpc.stopping().max_tokens(), 1u);
  r = Parse(kCompl, R"({"prompt": [1, 2], "echo": true})");
  EXPECT_TRUE(r.echo && !r.echo_only && !r.logprobs);
  EXPECT_TRUE(r.grpc.has_prompt_logprobs());
  EXPECT_EQ(r.grpc.prompt_logprobs(), 0u);
  EXPECT_EQ(r.grpc.stopping().max_tokens(), 16u);
  r = Parse(kCompl, R"({"prompt": "x", "echo": false, "max_tokens": 3})");
  EXPECT_FALSE(r.echo || r.grpc.has_prompt_logprobs());
  r = Parse(kCompl, R"({"prompt": "x", "echo": true, "logprobs": 1, "prompt_logprobs": 5})");
  EXPECT_TRUE(r.prompt_logprobs);
  EXPECT_EQ(r.grpc.prompt_logprobs(), 5u) << "prompt_logprobs given wins over logprobs";
  r = Parse(kCompl, R"({"prompt": "x", "echo": true, "stream": true, "max_tokens": 0})");
  EXPECT_TRUE(r.echo && r.echo_only && r.stream);
  r = Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 3})");
  EXPECT_TRUE(r.prompt_logprobs);
  EXPECT_EQ(r.grpc.prompt_logprobs(), 3u);
}

// logit_bias (OpenAI's object of string ids), allowed_token_ids, bad_words and
// spaces_between_special_tokens (vLLM's) on both endpoints; their ranges and
// counts are the coordinator's, whose messages map back to the same names.
TEST(OpenAiRequest, TokenControls) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  const std::string fields = R"("logit_bias": {"50256": -100, "7": 2.5, "0": 100}, "allowed_token_ids": [3, 1, 4],
      "bad_words": ["foo", "bar baz"], "spaces_between_special_tokens": false)";
  for (const auto& [endpoint, body] : {std::pair{kChat, "{" + msgs + ", " + fields + "}"},
                                       std::pair{kCompl, "{\"prompt\": \"x\", " + fields + "}"}}) {
    const OpenAiRequest r = Parse(endpoint, body);
    const v1::SamplingParams& s = r.grpc.sampling();
    ASSERT_EQ(s.logit_bias_size(), 3);
    EXPECT_FLOAT_EQ(s.logit_bias().at(50256), -100.0f);
    EXPECT_FLOAT_EQ(s.logit_bias().at(7), 2.5f);
    EXPECT_FLOAT_EQ(s.logit_bias().at(0), 100.0f);
    EXPECT_EQ(std::vector<uint32_t>(s.allowed_token_ids().begin(), s.allowed_token_ids().end()),
              (std::vector<uint32_t>{3, 1, 4}));
    EXPECT_EQ(std::vector<std::string>(s.bad_words().begin(), s.bad_words().end()),
              (std::vector<std::string>{"foo", "bar baz"}));
    ASSERT_TRUE(r.grpc.has_spaces_between_special_tokens());
    EXPECT_FALSE(r.grpc.spaces_between_special_tokens());
  }
  EXPECT_FALSE(Parse(kCompl, R"({"prompt": "x"})").grpc.has_spaces_between_special_tokens());  // default: true
  // Types here; a non-integer key is the key's fault.
  EXPECT_EQ(Refused(kChat, "{" + msgs + R"(, "logit_bias": {"abc": 1}})"), "logit_bias");
  EXPECT_EQ(Refused(kChat, "{" + msgs + R"(, "logit_bias": {"1.5": 1}})"), "logit_bias");
  EXPECT_EQ(Refused(kChat, "{" + msgs + R"(, "logit_bias": {"-3": 1}})"), "logit_bias");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "logit_bias": {"99999999999": 1}})"), "logit_bias");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "logit_bias": {"12": "high"}})"), "logit_bias[12]");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "logit_bias": [1, 2]})"), "logit_bias");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "allowed_token_ids": [1, -2]})"), "allowed_token_ids[1]");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "bad_words": "foo"})"), "bad_words");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "bad_words": ["foo", 3]})"), "bad_words[1]");
  EXPECT_EQ(Refused(kCompl, R"({"prompt": "x", "spaces_between_special_tokens": 1})"), "spaces_between_special_tokens");
  absl::StatusOr<OpenAiRequest> bad_key = ParseRequest(kChat, "{" + msgs + R"(, "logit_bias": {"abc": 1}})");
  EXPECT_TRUE(absl::StrContains(bad_key.status().message(), "is not a token id")) << bad_key.status();
  // The coordinator's range and count refusals name the OpenAI field.
  EXPECT_EQ(OpenAiParam(absl::InvalidArgumentError("sampling.logit_bias[5]: 101 is outside [-100, 100]; ..."), kChat),
            "logit_bias");
  EXPECT_EQ(OpenAiParam(absl::InvalidArgumentError("sampling.logit_bias: 301 entries are more than the limit of 300"),
                        kCompl),
            "logit_bias");
  EXPECT_EQ(OpenAiParam(absl::InvalidArgumentError("sampling.bad_words[2]: is empty"), kCompl), "bad_words");
}

TEST(OpenAiRequest, UnknownFieldListsTheKnownOnes) {
  absl::StatusOr<OpenAiRequest> r = ParseRequest(kCompl, R"({"prompt": "x", "frobnicate": 2})");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "max_tokens")) << r.status();
}

TEST(OpenAiRequest, CoordinatorFieldsMapToOpenAiNames) {
  auto param = [](const std::string& message, Endpoint e) {
    return OpenAiParam(absl::InvalidArgumentError(message), e).value_or("(none)");
  };
  EXPECT_EQ(param("sampling.top_p: 2 is outside (0, 1]", kChat), "top_p");
  EXPECT_EQ(param("stopping.stop[3]: too long", kChat), "stop");
  EXPECT_EQ(param("stopping.max_tokens: too many", kCompl), "max_tokens");
  EXPECT_EQ(param("chat.messages[1].role: \"x\" is not one of ...", kChat), "messages[1].role");
  EXPECT_EQ(param("chat.tools_json: not JSON", kChat), "tools");
  EXPECT_EQ(param("prompt_token_ids.ids[3]: outside the vocabulary", kCompl), "prompt");
  EXPECT_EQ(param("prompt: the prompt has 900 tokens", kChat), "messages");
  EXPECT_EQ(param("logprobs: at most 20", kChat), "top_logprobs");
  EXPECT_EQ(param("logprobs: at most 20", kCompl), "logprobs");
  EXPECT_EQ(param("token_ids: token id 9 at position 0 is not in the vocabulary", kCompl), "tokens");
  EXPECT_EQ(param("the server is starting: wait", kChat), "(none)");
  EXPECT_FALSE(OpenAiParam(absl::UnavailableError("x: y"), kChat));
}

TEST(OpenAiRequest, TokenizeAndDetokenizeBodies) {
  std::string model;
  absl::StatusOr<v1::TokenizeRequest> t = ParseTokenizeRequest(R"({"model": "m", "prompt": "hi"})", &model);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(model, "m");
  EXPECT_EQ(t->text(), "hi");
  EXPECT_TRUE(t->add_special_tokens());
  t = ParseTokenizeRequest(R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false,
                              "add_special_tokens": false})", &model);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->chat().messages(0).content(), "hi");
  EXPECT_FALSE(t->chat().add_generation_prompt());
  EXPECT_FALSE(t->add_special_tokens());
  EXPECT_FALSE(ParseTokenizeRequest(R"({"text": "hi"})", &model).ok());
  EXPECT_FALSE(ParseTokenizeRequest(R"({})", &model).ok());
  absl::StatusOr<v1::DetokenizeRequest> d = ParseDetokenizeRequest(R"({"tokens": [1, 2]})", &model);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->token_ids_size(), 2);
  EXPECT_EQ(OpenAiParam(ParseDetokenizeRequest(R"({"tokens": ["a"]})", &model).status(), kCompl), "tokens[0]");
  EXPECT_EQ(OpenAiParam(ParseDetokenizeRequest(R"({})", &model).status(), kCompl), "tokens");
}

}  // namespace
}  // namespace tpserve::http
