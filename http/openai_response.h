// OpenAI-compatible response bodies built from the public gRPC stream
// (tpserve.v1.GenerateResponse), the server-sent-event framing of the
// streaming ones, and OpenAI's error shape with its HTTP status.
//
// Non-streaming:  {"id", "object": "chat.completion" | "text_completion", "created",
//                  "model", "choices": [{"index": 0, "message": {"role": "assistant",
//                  "content"} | "text", "logprobs", "finish_reason"}, ...], "usage"}
//                  (n > 1: choice i of prompt p has "index" p * n + i, as vLLM's)
// Streaming: one SSE event per chunk, "data: {...}\n\n", then "data: [DONE]\n\n":
//   chat: first {"delta": {"role": "assistant", "content": ""}}, then
//   {"delta": {"content": TEXT}} per gRPC chunk (with "reasoning_content" and
//   "reasoning" for its reasoning, "tool_calls" for the calls it completed),
//   last {"delta": {}, "finish_reason"};
//   completions: {"text": TEXT} per chunk, last {"text": "", "finish_reason"};
//   with stream_options.include_usage every chunk has "usage": null and one
//   more chunk with "choices": [] carries the usage.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "http/openai_request.h"
#include "nlohmann/json.hpp"
#include "tpserve/v1/generation.pb.h"

namespace tpserve::http {

// What every chunk of one response repeats.
struct ResponseHead {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool include_usage = false;  // streaming: "usage": null on each chunk, then a usage chunk
};

// The id of a response to gRPC request `request_id`.
std::string ResponseId(Endpoint endpoint, const std::string& request_id);

// "stop" (EOS, a stop string or token), "length", "abort", "tool_calls".
std::string FinishReason(tpserve::v1::FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}
nlohmann::json UsageJson(const tpserve::v1::Usage& usage);

// The text a token's log-prob entry shows: the token decoded alone, or
// "token_id:N" (return_tokens_as_token_ids).
using TokenText = std::function<std::string(uint32_t id)>;

// The "logprobs" of a choice for `logprobs` (one per generated token):
// chat {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]};
// completions {"tokens", "token_logprobs", "top_logprobs": [{TOKEN: LOGPROB}],
// "text_offset"}, offsets counted from `text_offset` (bytes of text before these tokens).
nlohmann::json LogprobsJson(Endpoint endpoint,
                            const google::protobuf::RepeatedPtrField<tpserve::v1::TokenLogprob>& logprobs,
                            const TokenText& text_of, int64_t text_offset);

// echo (completions): the prompt's text as echoed, and the "logprobs" of
// prompt + output: OpenAI's {"tokens", "token_logprobs", "top_logprobs",
// "text_offset"}, the prompt's tokens first (the first with null log-prob
// and alternatives, as OpenAI and vLLM), the output's offsets after the
// echoed text. `prompt_text`: the prompt as the client gave it, or nullopt
// for token ids (then the coordinator's decoding of them, PromptLogprobs.text).
std::string EchoText(const tpserve::v1::PromptLogprobs& prompt, const std::optional<std::string>& prompt_text);
nlohmann::json EchoCompletionLogprobs(const tpserve::v1::PromptLogprobs& prompt,
                                      const google::protobuf::RepeatedPtrField<tpserve::v1::TokenLogprob>& output,
                                      const TokenText& text_of, int64_t echo_bytes);
// vLLM's "prompt_logprobs" of a choice: null for the first prompt token, then
// per token {"ID": {"logprob", "rank", "decoded_token"}} for its top
// alternatives (ranks 1, 2, ...) and for it (its own rank).
nlohmann::json PromptLogprobsJson(const tpserve::v1::PromptLogprobs& prompt, const TokenText& text_of);

// The whole non-streaming response. `logprobs`: null, or LogprobsJson's.
// Chat: the message has `reasoning_content` and `reasoning` (the same text:
// the name SGLang and llama.cpp use, and the one vLLM moved to) when there is
// reasoning, and `tool_calls` ([{"id", "type": "function", "function":
// {"name", "arguments"}}]) from complete.tool_calls, its content null when
// the answer is only calls.
nlohmann::json FullResponse(const ResponseHead& head, const std::string& text, const nlohmann::json& logprobs,
                            const tpserve::v1::Complete& complete, const std::string& reasoning = "");

// One choice of a response of several (n > 1, or a list of prompts).
struct ChoiceBody {
  std::string text;
  nlohmann::json logprobs;  // null, or LogprobsJson's
  nlohmann::json prompt_logprobs;  // absent when null, else PromptLogprobsJson's
  tpserve::v1::Complete complete;
  std::string reasoning;
};
// The response of `choices` in order, "index" counting from 0; usage: the
// prompt tokens of each distinct prompt once (`prompts`: choices per prompt,
// consecutive), the completion tokens of every choice.
nlohmann::json FullResponse(const ResponseHead& head, const std::vector<ChoiceBody>& choices, int choices_per_prompt);
// The usage of `completes` as FullResponse counts it.
tpserve::v1::Usage SummedUsage(const std::vector<const tpserve::v1::Complete*>& completes, int choices_per_prompt);

// What a streamed chat chunk carries beside its text: reasoning, and the
// calls completed by it (OpenAI's tool_calls deltas, each call whole, with
// "index" counting the stream's calls from first_tool_index).
struct ChatExtras {
  std::string reasoning;
  const google::protobuf::RepeatedPtrField<tpserve::v1::ToolCall>* tool_calls = nullptr;
  int first_tool_index = 0;
};

// One streamed chunk: `text` (chat: the delta's content; `role` adds
// "role": "assistant"), `logprobs` (null or LogprobsJson's), `finish_reason` on the last.
// `index`: the choice (n > 1: each choice's chunks come interleaved).
nlohmann::json StreamChunk(const ResponseHead& head, const std::optional<std::string>& text, bool role,
                           const nlohmann::json& logprobs, const std::optional<std::string>& finish_reason,
                           const ChatExtras& extras = {}, int index = 0);
// The chunk after the last, with include_usage: "choices": [] and the usage.
nlohmann::json UsageChunk(const ResponseHead& head, const tpserve::v1::Usage& usage);

// One server-sent event: "data: " + the JSON on one line + "\n\n".
std::string SseEvent(const nlohmann::json& data);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// JSON text of `value`, ill-formed UTF-8 replaced by U+FFFD.
std::string Dump(const nlohmann::json& value);

// An error as OpenAI answers it: the HTTP status and
// {"error": {"message", "type", "param", "code"}}.
struct HttpError {
  int status = 500;
  std::string message;
  std::string type;                  // invalid_request_error, authentication_error, ...
  std::optional<std::string> param;  // the request field at fault
  std::optional<std::string> code;   // e.g. model_not_found, invalid_api_key
};
nlohmann::json ErrorBody(const HttpError& error);

// The HTTP status of a gRPC status: INVALID_ARGUMENT 400, UNAUTHENTICATED 401,
// PERMISSION_DENIED 403, NOT_FOUND 404, ALREADY_EXISTS 409, RESOURCE_EXHAUSTED 429,
// CANCELLED 499, UNAVAILABLE 503, DEADLINE_EXCEEDED 504, anything else 500.
int HttpStatusOf(absl::StatusCode code);

// The error to answer for a failed parse (absl) or gRPC call, the param
// mapped to the OpenAI field (OpenAiParam).
HttpError ErrorOf(const absl::Status& status, Endpoint endpoint);
HttpError ErrorOf(const grpc::Status& status, Endpoint endpoint);

}  // namespace tpserve::http
