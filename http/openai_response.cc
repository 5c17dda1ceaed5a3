#include "http/openai_response.h"

#include <algorithm>

#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;
using nlohmann::json;

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

json ChatLogprobs(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs, const TokenText& text_of) {
  json content = json::array();
  for (const v1::TokenLogprob& lp : logprobs) {
    json top = json::array();
    for (const v1::TopLogprob& t : lp.top()) {
      const std::string token = text_of(t.token_id());
      top.push_back({{"token", token}, {"logprob", t.logprob()}, {"bytes", Bytes(token)}});
    }
    const std::string token = text_of(lp.token_id());
    content.push_back({{"token", token}, {"logprob", lp.logprob()}, {"bytes", Bytes(token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json CompletionLogprobs(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs,
                        const TokenText& text_of, int64_t text_offset) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const v1::TokenLogprob& lp : logprobs) {
    const std::string token = text_of(lp.token_id());
    tokens.push_back(token);
    token_logprobs.push_back(lp.logprob());
    json top = json::object();
    for (const v1::TopLogprob& t : lp.top()) top[text_of(t.token_id())] = t.logprob();
    top_logprobs.push_back(top);
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(token.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

bool IsChat(const ResponseHead& head) { return head.endpoint == Endpoint::kChatCompletions; }

json Envelope(const ResponseHead& head, const char* chat_object, const char* completion_object) {
  return {{"id", head.id},
          {"object", IsChat(head) ? chat_object : completion_object},
          {"created", head.created},
          {"model", head.model}};
}

}  // namespace

std::string ResponseId(Endpoint endpoint, const std::string& request_id) {
  return absl::StrCat(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-", request_id);
}

std::string FinishReason(v1::FinishReason reason) {
  switch (reason) {
    case v1::LENGTH: return "length";
    case v1::EOS:
    case v1::STOP_SEQUENCE: return "stop";
    case v1::ABORTED: return "abort";
    case v1::TOOL_CALLS: return "tool_calls";
    default: return "stop";
  }
}

json UsageJson(const v1::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens()},
          {"completion_tokens", usage.completion_tokens()},
          {"total_tokens", usage.prompt_tokens() + usage.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens()}}}};
}

json LogprobsJson(Endpoint endpoint, const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs,
                  const TokenText& text_of, int64_t text_offset) {
  return endpoint == Endpoint::kChatCompletions ? ChatLogprobs(logprobs, text_of)
                                                : CompletionLogprobs(logprobs, text_of, text_offset);
}

json ToolCallsJson(const google::protobuf::RepeatedPtrField<v1::ToolCall>& calls, int first_index, bool streamed) {
  json out = json::array();
  for (int i = 0; i < calls.size(); ++i) {
    const v1::ToolCall& c = calls[i];
    json call = {{"id", c.id()}, {"type", "function"},
                 {"function", {{"name", c.name()}, {"arguments", c.arguments()}}}};
    if (streamed) call["index"] = first_index + i;
    out.push_back(std::move(call));
  }
  return out;
}

std::string EchoText(const v1::PromptLogprobs& prompt, const std::optional<std::string>& prompt_text) {
  return prompt_text ? *prompt_text : prompt.text();
}

json EchoCompletionLogprobs(const v1::PromptLogprobs& prompt,
                            const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& output, const TokenText& text_of,
                            int64_t echo_bytes) {
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  int64_t offset = 0;
  for (int i = 0; i < prompt.token_ids_size(); ++i) {
    const std::string token = text_of(prompt.token_ids(i));
    out["tokens"].push_back(token);
    out["text_offset"].push_back(offset);
    offset += static_cast<int64_t>(token.size());
    if (i == 0 || i - 1 >= prompt.logprobs_size()) {  // nothing precedes the first token
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
      continue;
    }
    const v1::TokenLogprob& lp = prompt.logprobs(i - 1);
    out["token_logprobs"].push_back(lp.logprob());
    json top = json::object();
    for (const v1::TopLogprob& t : lp.top()) top[text_of(t.token_id())] = t.logprob();
    out["top_logprobs"].push_back(std::move(top));
  }
  const json generated = CompletionLogprobs(output, text_of, echo_bytes);
  for (auto& [key, values] : out.items()) {
    for (const json& v : generated[key]) values.push_back(v);
  }
  return out;
}

json PromptLogprobsJson(const v1::PromptLogprobs& prompt, const TokenText& text_of) {
  json out = json::array();
  if (prompt.token_ids_size() > 0) out.push_back(nullptr);
  for (const v1::TokenLogprob& lp : prompt.logprobs()) {
    json entry = json::object();
    int rank = 1;  // the alternatives are the most likely, in order
    for (const v1::TopLogprob& t : lp.top()) {
      entry[std::to_string(t.token_id())] = {{"logprob", t.logprob()}, {"rank", rank++},
                                             {"decoded_token", text_of(t.token_id())}};
    }
    entry[std::to_string(lp.token_id())] = {{"logprob", lp.logprob()}, {"rank", lp.rank()},
                                            {"decoded_token", text_of(lp.token_id())}};
    out.push_back(std::move(entry));
  }
  return out;
}

json FullResponse(const ResponseHead& head, const std::string& text, const json& logprobs,
                  const v1::Complete& complete, const std::string& reasoning) {
  return FullResponse(head, {ChoiceBody{.text = text, .logprobs = logprobs, .complete = complete, .reasoning = reasoning}},
                      1);
}

v1::Usage SummedUsage(const std::vector<const v1::Complete*>& completes, int choices_per_prompt) {
  v1::Usage usage;
  for (size_t i = 0; i < completes.size(); ++i) {
    const v1::Usage& u = completes[i]->usage();
    if (i % static_cast<size_t>(std::max(1, choices_per_prompt)) == 0) {  // each prompt once
      usage.set_prompt_tokens(usage.prompt_tokens() + u.prompt_tokens());
      usage.set_cached_tokens(usage.cached_tokens() + u.cached_tokens());
    }
    usage.set_completion_tokens(usage.completion_tokens() + u.completion_tokens());
  }
  return usage;
}

json FullResponse(const ResponseHead& head, const std::vector<ChoiceBody>& choices, int choices_per_prompt) {
  json out = Envelope(head, "chat.completion", "text_completion");
  out["choices"] = json::array();
  std::vector<const v1::Complete*> completes;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceBody& b = choices[i];
    const v1::Complete& complete = b.complete;
    json choice = {{"index", i}, {"logprobs", b.logprobs}, {"finish_reason", FinishReason(complete.finish_reason())}};
    if (!b.prompt_logprobs.is_null()) choice["prompt_logprobs"] = b.prompt_logprobs;
    if (IsChat(head)) {
      const bool calls = complete.tool_calls_size() > 0;
      json message = {{"role", "assistant"}, {"content", calls && b.text.empty() ? json(nullptr) : json(b.text)}};
      if (!b.reasoning.empty()) message["reasoning_content"] = message["reasoning"] = b.reasoning;
      if (calls) message["tool_calls"] = ToolCallsJson(complete.tool_calls(), 0, /*streamed=*/false);
      choice["message"] = std::move(message);
    } else {
      choice["text"] = b.text;
    }
    out["choices"].push_back(std::move(choice));
    completes.push_back(&complete);
  }
  out["usage"] = UsageJson(SummedUsage(completes, choices_per_prompt));
  return out;
}

json StreamChunk(const ResponseHead& head, const std::optional<std::string>& text, bool role, const json& logprobs,
                 const std::optional<std::string>& finish_reason, const ChatExtras& extras, int index) {
  json choice = {{"index", index}, {"logprobs", logprobs},
                 {"finish_reason", finish_reason ? json(*finish_reason) : json(nullptr)}};
  if (IsChat(head)) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (text) delta["content"] = *text;
    if (!extras.reasoning.empty()) delta["reasoning_content"] = delta["reasoning"] = extras.reasoning;
    if (extras.tool_calls != nullptr && !extras.tool_calls->empty()) {
      delta["tool_calls"] = ToolCallsJson(*extras.tool_calls, extras.first_tool_index, /*streamed=*/true);
    }
    choice["delta"] = delta;
  } else {
    choice["text"] = text.value_or("");
  }
  json out = Envelope(head, "chat.completion.chunk", "text_completion");
  out["choices"] = json::array({choice});
  if (head.include_usage) out["usage"] = nullptr;
  return out;
}

json UsageChunk(const ResponseHead& head, const v1::Usage& usage) {
  json out = Envelope(head, "chat.completion.chunk", "text_completion");
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseEvent(const json& data) { return absl::StrCat("data: ", Dump(data), "\n\n"); }

json ErrorBody(const HttpError& error) {
  return {{"error", {{"message", error.message},
                     {"type", error.type},
                     {"param", error.param ? json(*error.param) : json(nullptr)},
                     {"code", error.code ? json(*error.code) : json(nullptr)}}}};
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

HttpError ErrorOf(const absl::Status& status, Endpoint endpoint) {
  HttpError e;
  e.status = HttpStatusOf(status.code());
  e.message = std::string(status.message());
  // A bare status (UNIMPLEMENTED from something that is not a coordinator, say): its code.
  if (e.message.empty()) e.message = absl::StrCat("the coordinator answered ", absl::StatusCodeToString(status.code()));
  switch (e.status) {
    case 400: e.type = "invalid_request_error"; break;
    case 401: e.type = "authentication_error"; break;
    case 403: e.type = "permission_error"; break;
    case 404: e.type = "not_found_error"; break;
    case 429: e.type = "rate_limit_error"; break;
    case 503: e.type = "service_unavailable"; break;
    default: e.type = "server_error"; break;
  }
  if (e.status == 400) e.param = OpenAiParam(status, endpoint);
  return e;
}

HttpError ErrorOf(const grpc::Status& status, Endpoint endpoint) {
  return ErrorOf(absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()), endpoint);
}

}  // namespace tpserve::http
