// http/openai_response.h: the bodies OpenAI clients parse, SSE framing byte
// for byte, and errors in OpenAI's shape with their HTTP status.
#include "http/openai_response.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;
using nlohmann::json;

ResponseHead Head(Endpoint endpoint, bool include_usage = false) {
  return {.endpoint = endpoint, .id = ResponseId(endpoint, "req-1"), .created = 1700000000, .model = "tiny",
          .include_usage = include_usage};
}

v1::Complete Complete(v1::FinishReason reason) {
  v1::Complete c;
  c.set_finish_reason(reason);
  c.mutable_usage()->set_prompt_tokens(5);
  c.mutable_usage()->set_completion_tokens(3);
  c.mutable_usage()->set_cached_tokens(2);
  return c;
}

TEST(OpenAiResponse, SseFramingByteForByte) {
  const ResponseHead head = Head(Endpoint::kChatCompletions);
  EXPECT_EQ(SseEvent(StreamChunk(head, std::string(), true, nullptr, std::nullopt)),
            "data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"},\"finish_reason\":null,"
            "\"index\":0,\"logprobs\":null}],\"created\":1700000000,\"id\":\"chatcmpl-req-1\","
            "\"model\":\"tiny\",\"object\":\"chat.completion.chunk\"}\n\n");
  EXPECT_EQ(SseEvent(StreamChunk(head, std::nullopt, false, nullptr, "length")),
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\",\"index\":0,\"logprobs\":null}],"
            "\"created\":1700000000,\"id\":\"chatcmpl-req-1\",\"model\":\"tiny\","
            "\"object\":\"chat.completion.chunk\"}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  // A newline in the text stays escaped inside the one data line.
  const std::string event =
      SseEvent(StreamChunk(Head(Endpoint::kCompletions), "a\nb\n\n", false, nullptr, std::nullopt));
  EXPECT_EQ(event.find('\n'), event.size() - 2) << event;
  EXPECT_NE(event.find(R"("text":"a\nb\n\n")"), std::string::npos) << event;
  EXPECT_NE(event.find(R"("object":"text_completion")"), std::string::npos) << event;
}

TEST(OpenAiResponse, IllFormedUtf8IsReplacedNotThrown) {
  const std::string event = SseEvent(StreamChunk(Head(Endpoint::kCompletions), "a\xff", false, nullptr, std::nullopt));
  EXPECT_NE(event.find("a\xef\xbf\xbd"), std::string::npos) << event;
}

TEST(OpenAiResponse, UsageChunkOnlyWithIncludeUsage) {
  const ResponseHead head = Head(Endpoint::kChatCompletions, /*include_usage=*/true);
  const json chunk = StreamChunk(head, std::string("x"), false, nullptr, std::nullopt);
  ASSERT_TRUE(chunk.contains("usage"));
  EXPECT_TRUE(chunk["usage"].is_null());
  EXPECT_FALSE(StreamChunk(Head(Endpoint::kChatCompletions), std::string("x"), false, nullptr, std::nullopt)
                   .contains("usage"));
  const json usage = UsageChunk(head, Complete(v1::LENGTH).usage());
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], json::parse(R"({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
                                            "prompt_tokens_details": {"cached_tokens": 2}})"));
}

TEST(OpenAiResponse, FullResponses) {
  const json chat = FullResponse(Head(Endpoint::kChatCompletions), "hello", nullptr, Complete(v1::EOS));
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": "hello"})"));
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chat["usage"]["total_tokens"], 8);
  const json text = FullResponse(Head(Endpoint::kCompletions), "hello", nullptr, Complete(v1::LENGTH));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["id"], "cmpl-req-1");
  EXPECT_EQ(text["choices"][0]["text"], "hello");
  EXPECT_EQ(text["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(FinishReason(v1::STOP_SEQUENCE), "stop");
  EXPECT_EQ(FinishReason(v1::ABORTED), "abort");
}

// Reasoning and tool calls: the message's reasoning_content / reasoning and
// tool_calls (content null when the answer is only calls), finish "tool_calls";
// streamed, each call whole in a delta with its index in the stream.
TEST(OpenAiResponse, ReasoningAndToolCalls) {
  const ResponseHead head = Head(Endpoint::kChatCompletions);
  v1::Complete c = Complete(v1::TOOL_CALLS);
  v1::ToolCall* call = c.add_tool_calls();
  call->set_id("call_abc");
  call->set_type("function");
  call->set_name("get_weather");
  call->set_arguments(R"({"city":"Paris"})");
  const json full = FullResponse(head, "", nullptr, c, "think first");
  const json& message = full["choices"][0]["message"];
  EXPECT_EQ(message["content"], nullptr);
  EXPECT_EQ(message["reasoning_content"], "think first");
  EXPECT_EQ(message["reasoning"], "think first");
  EXPECT_EQ(message["tool_calls"], json::parse(R"([{"id": "call_abc", "type": "function",
                                                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}])"));
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  // Text and no calls: content as before, no tool_calls key, no reasoning keys.
  const json plain = FullResponse(head, "hi", nullptr, Complete(v1::EOS));
  EXPECT_EQ(plain["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": "hi"})"));

  const ChatExtras extras{.reasoning = "hm", .tool_calls = &c.tool_calls(), .first_tool_index = 2};
  const json delta = StreamChunk(head, std::nullopt, false, nullptr, std::nullopt, extras)["choices"][0]["delta"];
  EXPECT_EQ(delta["reasoning_content"], "hm");
  EXPECT_FALSE(delta.contains("content"));
  ASSERT_EQ(delta["tool_calls"].size(), 1u);
  EXPECT_EQ(delta["tool_calls"][0]["index"], 2);
  EXPECT_EQ(delta["tool_calls"][0]["function"]["name"], "get_weather");
}

TEST(OpenAiResponse, LogprobsInBothShapes) {
  google::protobuf::RepeatedPtrField<v1::TokenLogprob> lps;
  for (uint32_t id : {7u, 8u}) {
    v1::TokenLogprob* lp = lps.Add();
    lp->set_token_id(id);
    lp->set_logprob(-0.5f);
    v1::TopLogprob* t = lp->add_top();
    t->set_token_id(id);
    t->set_logprob(-0.5f);
    t = lp->add_top();
    t->set_token_id(9);
    t->set_logprob(-2.0f);
  }
  const TokenText text_of = [](uint32_t id) { return id == 7 ? std::string("ab") : absl::StrCat("<", id, ">"); };
  const json chat = LogprobsJson(Endpoint::kChatCompletions, lps, text_of, 0);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "ab");
  EXPECT_EQ(chat["content"][0]["bytes"], json::parse("[97, 98]"));
  EXPECT_EQ(chat["content"][0]["logprob"], -0.5);
  EXPECT_EQ(chat["content"][1]["top_logprobs"][1]["token"], "<9>");
  const json text = LogprobsJson(Endpoint::kCompletions, lps, text_of, 10);
  EXPECT_EQ(text["tokens"], json::parse(R"(["ab", "<8>"])"));
  EXPECT_EQ(text["token_logprobs"], json::parse("[-0.5, -0.5]"));
  EXPECT_EQ(text["text_offset"], json::parse("[10, 12]"));
  EXPECT_EQ(text["top_logprobs"][0], json::parse(R"({"ab": -0.5, "<9>": -2.0})"));
}

// echo: the prompt's tokens first (null for the first), the output's offsets
// after the echoed text; vLLM's prompt_logprobs: null, then {id: {logprob,
// rank, decoded_token}} for the alternatives and the prompt token.
TEST(OpenAiResponse, EchoAndPromptLogprobs) {
  v1::PromptLogprobs prompt;
  for (uint32_t id : {7u, 8u, 9u}) prompt.add_token_ids(id);
  for (uint32_t id : {8u, 9u}) {
    v1::TokenLogprob* lp = prompt.add_logprobs();
    lp->set_token_id(id);
    lp->set_logprob(-1.5f);
    lp->set_rank(id == 8 ? 1 : 4);
    v1::TopLogprob* t = lp->add_top();
    t->set_token_id(8);
    t->set_logprob(id == 8 ? -1.5f : -0.25f);
  }
  google::protobuf::RepeatedPtrField<v1::TokenLogprob> output;
  v1::TokenLogprob* out = output.Add();
  out->set_token_id(7);
  out->set_logprob(-0.75f);
  const TokenText text_of = [](uint32_t id) { return id == 7 ? std::string("ab") : absl::StrCat("<", id, ">"); };
  prompt.set_text("ab<8><9>");
  const std::string echoed = EchoText(prompt, std::nullopt);
  EXPECT_EQ(echoed, "ab<8><9>") << "token ids: the coordinator's decoding";
  EXPECT_EQ(EchoText(prompt, std::string("as given")), "as given");
  const json lp = EchoCompletionLogprobs(prompt, output, text_of, std::ssize(echoed));
  EXPECT_EQ(lp["tokens"], json::parse(R"(["ab", "<8>", "<9>", "ab"])"));
  EXPECT_EQ(lp["token_logprobs"], json::parse("[null, -1.5, -1.5, -0.75]"));
  EXPECT_EQ(lp["text_offset"], json::parse("[0, 2, 5, 8]"));
  EXPECT_EQ(lp["top_logprobs"], json::parse(R"([null, {"<8>": -1.5}, {"<8>": -0.25}, {}])"));
  const json vllm = PromptLogprobsJson(prompt, text_of);
  EXPECT_EQ(vllm, json::parse(R"([null,
      {"8": {"logprob": -1.5, "rank": 1, "decoded_token": "<8>"}},
      {"8": {"logprob": -0.25, "rank": 1, "decoded_token": "<8>"},
       "9": {"logprob": -1.5, "rank": 4, "decoded_token": "<9>"}}])"));
}

TEST(OpenAiResponse, ErrorsInOpenAiShape) {
  const HttpError e = ErrorOf(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p: 2 is outside (0, 1]"),
                              Endpoint::kChatCompletions);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(ErrorBody(e), json::parse(R"({"error": {"message": "sampling.top_p: 2 is outside (0, 1]",
      "type": "invalid_request_error", "param": "top_p", "code": null}})"));
  EXPECT_EQ(ErrorOf(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full"), Endpoint::kCompletions).status,
            429);
  EXPECT_EQ(ErrorOf(grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining"), Endpoint::kCompletions).status, 503);
  EXPECT_EQ(ErrorOf(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no key"), Endpoint::kCompletions).status, 401);
  EXPECT_EQ(ErrorOf(grpc::Status(grpc::StatusCode::INTERNAL, "step failed"), Endpoint::kCompletions).status, 500);
  EXPECT_FALSE(ErrorOf(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x: y"), Endpoint::kCompletions).param);
}

}  // namespace
}  // namespace tpserve::http
