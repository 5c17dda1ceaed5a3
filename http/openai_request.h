// OpenAI-compatible request bodies (POST /v1/chat/completions and
// /v1/completions) mapped onto the public gRPC request (tpserve.v1.GenerateRequest).
//
// Every field is checked for its JSON type here; ranges are the coordinator's
// (its INVALID_ARGUMENT names the proto field, which OpenAiParam maps back).
// A field this API does not know is an error naming it, as is a known field
// with an unsupported value (best_of > 1, echo). JSON null
// is the same as an absent field.
//
//   body field                           GenerateRequest field
//   messages (chat)                      chat.messages (role, content as text or text
//                                        parts, name, tool_call_id, tool_calls,
//                                        reasoning_content); chat.add_generation_prompt
//   tools, tool_choice "auto" | "none"   chat.tools_json (none: no tools), chat.tool_choice
//     | "required" | {"type": "function",  (REQUIRED / FUNCTION with function_name),
//     "function": {"name"}},               parallel_tool_calls
//     parallel_tool_calls
//   response_format {"type": "text" |    structured_output (json_object, or json_schema
//     "json_object" | "json_schema",        from json_schema.schema)
//     "json_schema": {"name", "schema"}}
//   structured_outputs (vLLM): one of     structured_output (json_schema, regex, choice, ebnf)
//     json, regex, choice, grammar
//   separate_reasoning (SGLang's; default  separate_reasoning
//     true)
//   chat_template_kwargs                 chat.chat_template_kwargs (values as JSON text)
//   prompt (completions): text, [text],  prompt | prompt_token_ids (a list of
//     token ids, [token ids]             several: one call per prompt, OpenAiRequest::prompts)
//   max_tokens, max_completion_tokens    stopping.max_tokens (completions default 16, as OpenAI's)
//   min_tokens, stop (text or list),     stopping.min_tokens, stop, stop_token_ids,
//     stop_token_ids, ignore_eos,          ignore_eos, include_stop_str_in_output
//     include_stop_str_in_output
//   temperature, top_p, top_k, min_p,    sampling.*
//     seed, presence_penalty,
//     frequency_penalty, repetition_penalty
//   logprobs + top_logprobs (chat),      logprobs (the number of alternatives)
//     logprobs: N (completions)
//   skip_special_tokens (default true)   skip_special_tokens
//   spaces_between_special_tokens        spaces_between_special_tokens (no effect on the text
//     (vLLM's, default true)               of tokenizer.json tokenizers, as in vLLM)
//   logit_bias {"id": bias} (OpenAI's),  sampling.logit_bias, allowed_token_ids,
//     allowed_token_ids, bad_words         bad_words (token-level controls)
//     (vLLM's)
//   n (1 to 128)                         n (choices: each "index" of the response)
//   best_of (completions; 1 only, as vLLM which dropped it)
//   model, stream, stream_options.include_usage, return_tokens_as_token_ids,
//   user (ignored)                       the response (OpenAiRequest)
//   echo (completions)                   prompt_logprobs (= logprobs, else 0) and the
//                                        response: the prompt before the text, its tokens
//                                        first in logprobs; with max_tokens 0 only the
//                                        prompt (max_tokens 1 asked, its token dropped)
//   prompt_logprobs (vLLM's)             prompt_logprobs; each choice's "prompt_logprobs"
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tpserve/v1/generation.pb.h"

namespace tpserve::http {

enum class Endpoint { kChatCompletions, kCompletions };

// Arrays and objects open at once in a request body (tool schemas included).
inline constexpr int kMaxJsonDepth = 128;

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;           // as the client named it ("" when absent)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
  bool logprobs = false;       // answer log-probs (grpc.logprobs alternatives each)
  bool tokens_as_ids = false;  // return_tokens_as_token_ids: log-prob tokens as "token_id:N"
  bool echo = false;             // completions: the prompt (and its log-probs) before the output
  bool echo_only = false;        // echo with max_tokens 0: the prompt alone, finish_reason "length"
  bool prompt_logprobs = false;  // vLLM's prompt_logprobs: each choice's "prompt_logprobs" list
  tpserve::v1::GenerateRequest grpc;
  // Completions with a list of two or more prompts: each prompt's input
  // (prompt or prompt_token_ids), one Generate call each with the rest of
  // `grpc`; choice i of prompt p is the response's choice p * n + i. Empty:
  // the one input is grpc's.
  std::vector<tpserve::v1::GenerateRequest> prompts;
  // The caller's API key name (tpserve-http's --api-key-file), which the
  // calls name to the coordinator (kClientNameMetadata) when tpserve-http
  // has a key of its own there (--server-api-key-file); else "".
  std::string client;
};

// The request in `body`. INVALID_ARGUMENT whose message starts with the
// field ("temperature: ...", "messages[2].role: ...") and whose payload
// (ErrorParam) is that field.
absl::StatusOr<OpenAiRequest> ParseRequest(Endpoint endpoint, absl::string_view body);

// POST /tokenize, as vLLM's: {"prompt": TEXT} or {"messages": [...]} (as in
// chat completions, with "add_generation_prompt", default true), plus
// "add_special_tokens" (default true) and "model" (into `model`).
absl::StatusOr<tpserve::v1::TokenizeRequest> ParseTokenizeRequest(absl::string_view body, std::string* model);
// POST /detokenize: {"tokens": [ids], "model"}.
absl::StatusOr<tpserve::v1::DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body, std::string* model);

// The OpenAI field an INVALID_ARGUMENT is about: the payload ParseRequest
// sets, else the coordinator's proto field at the start of the message mapped
// to its OpenAI name ("sampling.top_p: ..." -> "top_p"); nullopt when neither.
std::optional<std::string> OpenAiParam(const absl::Status& status, Endpoint endpoint);

// An INVALID_ARGUMENT "FIELD: what" carrying FIELD as its OpenAI param.
absl::Status InvalidField(absl::string_view field, absl::string_view what);

}  // namespace tpserve::http
