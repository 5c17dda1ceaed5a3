#include "coordinator/request.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status CheckTokenIds(absl::string_view field,
                           const google::protobuf::RepeatedField<uint32_t>& ids, int32_t vocab) {
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] >= static_cast<uint32_t>(vocab)) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat("token id ", ids[i], " is outside the vocabulary (ids 0..",
                                  vocab - 1, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckChat(const v1::Chat& chat) {
  if (chat.messages().empty()) return Invalid("chat.messages", "is empty; give at least one message");
  for (int i = 0; i < chat.messages_size(); ++i) {
    const std::string& role = chat.messages(i).role();
    const std::string field = absl::StrCat("chat.messages[", i, "].role");
    if (role != "system" && role != "user" && role != "assistant") {
      return Invalid(field, absl::StrCat("\"", role, "\" is not one of system, user, assistant"));
    }
    if (role == "system" && i > 0) return Invalid(field, "a system message may only come first");
  }
  return absl::OkStatus();
}

// A finite float in [lo, hi] (lo_open: (lo, hi]).
bool InRange(float v, float lo, float hi, bool lo_open = false) {
  if (!std::isfinite(v)) return false;
  return (lo_open ? v > lo : v >= lo) && v <= hi;
}

}  // namespace

absl::Status ValidateRequestFields(const v1::GenerateRequest& request, const RequestLimits& limits) {
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (request.prompt().empty()) return Invalid("prompt", "is empty; give some text");
      break;
    case v1::GenerateRequest::kPromptTokenIds:
      if (request.prompt_token_ids().ids().empty()) {
        return Invalid("prompt_token_ids.ids", "is empty; give at least one token id");
      }
      if (auto s = CheckTokenIds("prompt_token_ids.ids", request.prompt_token_ids().ids(),
                                 limits.vocab_size);
          !s.ok()) {
        return s;
      }
      break;
    case v1::GenerateRequest::kChat:
      if (auto s = CheckChat(request.chat()); !s.ok()) return s;
      break;
    case v1::GenerateRequest::INPUT_NOT_SET:
      return Invalid("prompt", "no input; set one of prompt, prompt_token_ids or chat");
  }

  const v1::SamplingParams& s = request.sampling();
  if (s.has_temperature() && !InRange(s.temperature(), 0.f, 1e6f)) {
    return Invalid("sampling.temperature",
                   absl::StrCat("must be >= 0 (0 = greedy), got ", s.temperature()));
  }
  if (s.has_top_p() && !InRange(s.top_p(), 0.f, 1.f, /*lo_open=*/true)) {
    return Invalid("sampling.top_p", absl::StrCat("must be in (0, 1], got ", s.top_p()));
  }
  if (s.has_top_k() && s.top_k() < -1) {
    return Invalid("sampling.top_k", absl::StrCat("must be -1 or 0 (off) or positive, got ", s.top_k()));
  }
  if (s.has_min_p() && !InRange(s.min_p(), 0.f, 1.f)) {
    return Invalid("sampling.min_p", absl::StrCat("must be in [0, 1], got ", s.min_p()));
  }
  if (s.has_repetition_penalty() && !InRange(s.repetition_penalty(), 0.f, 1e6f, true)) {
    return Invalid("sampling.repetition_penalty",
                   absl::StrCat("must be > 0 (1 = off), got ", s.repetition_penalty()));
  }
  if (!InRange(s.presence_penalty(), -2.f, 2.f)) {
    return Invalid("sampling.presence_penalty",
                   absl::StrCat("must be in [-2, 2], got ", s.presence_penalty()));
  }
  if (!InRange(s.frequency_penalty(), -2.f, 2.f)) {
    return Invalid("sampling.frequency_penalty",
                   absl::StrCat("must be in [-2, 2], got ", s.frequency_penalty()));
  }

  const v1::StoppingParams& st = request.stopping();
  if (st.has_max_tokens() && st.max_tokens() == 0) {
    return Invalid("stopping.max_tokens", "must be at least 1 (leave it unset for the model's maximum)");
  }
  if (st.has_max_tokens() && st.min_tokens() > st.max_tokens()) {
    return Invalid("stopping.min_tokens", absl::StrCat(st.min_tokens(), " is above stopping.max_tokens (",
                                                       st.max_tokens(), ")"));
  }
  std::vector<std::string> stop(st.stop().begin(), st.stop().end());
  if (auto status = ValidateStopStrings(stop); !status.ok()) return status;
  if (auto status = CheckTokenIds("stopping.stop_token_ids", st.stop_token_ids(), limits.vocab_size);
      !status.ok()) {
    return status;
  }
  if (request.has_logprobs() && request.logprobs() > static_cast<uint32_t>(limits.max_logprobs)) {
    return Invalid("logprobs", absl::StrCat(request.logprobs(), " alternatives asked, at most ",
                                            limits.max_logprobs));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> EncodeChat(const v1::Chat& chat, const Tokenizer& tokenizer,
                                                ChatFormat format) {
  if (auto s = CheckChat(chat); !s.ok()) return s;
  std::vector<ChatMessage> messages;
  for (const v1::ChatMessage& m : chat.messages()) messages.push_back({m.role(), m.content()});
  absl::StatusOr<std::string> text = RenderChat(format, messages, /*add_generation_prompt=*/true);
  if (!text.ok()) return Invalid("chat.messages", text.status().message());
  return tokenizer.Encode(*text, /*add_special_tokens=*/false);
}

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const Tokenizer& tokenizer, ChatFormat format,
                                               const RequestLimits& limits) {
  if (auto s = ValidateRequestFields(request, limits); !s.ok()) return s;
  PreparedRequest out;
  absl::string_view input_field = "prompt";
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      out.prompt = tokenizer.Encode(request.prompt(), /*add_special_tokens=*/true);
      break;
    case v1::GenerateRequest::kPromptTokenIds:
      input_field = "prompt_token_ids.ids";
      out.prompt.assign(request.prompt_token_ids().ids().begin(), request.prompt_token_ids().ids().end());
      break;
    case v1::GenerateRequest::kChat: {
      input_field = "chat.messages";
      absl::StatusOr<std::vector<int32_t>> ids = EncodeChat(request.chat(), tokenizer, format);
      if (!ids.ok()) return ids.status();
      out.prompt = std::move(*ids);
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      break;  // rejected above
  }
  const int64_t n = static_cast<int64_t>(out.prompt.size());
  if (n == 0) return Invalid(input_field, "encodes to no tokens; give some text");
  if (n >= limits.max_model_len) {
    return Invalid(input_field, absl::StrCat("the prompt has ", n, " tokens; the model's maximum length is ",
                                             limits.max_model_len,
                                             " tokens including at least one generated token"));
  }
  const int64_t room = limits.max_model_len - n;
  const v1::StoppingParams& st = request.stopping();
  if (st.has_max_tokens() && st.max_tokens() > room) {
    return Invalid("stopping.max_tokens",
                   absl::StrCat(st.max_tokens(), " tokens asked, but the prompt's ", n,
                                " tokens leave room for ", room, " (maximum length ",
                                limits.max_model_len, ")"));
  }

  const v1::SamplingParams& s = request.sampling();
  const GenerationDefaults& d = limits.defaults;
  SamplingParams& w = out.sampling;
  w.temperature = s.has_temperature() ? s.temperature() : static_cast<float>(d.temperature.value_or(1.0));
  w.top_p = s.has_top_p() ? s.top_p() : static_cast<float>(d.top_p.value_or(1.0));
  w.top_k = s.has_top_k() ? s.top_k() : static_cast<int32_t>(d.top_k.value_or(-1));
  w.min_p = s.has_min_p() ? s.min_p() : 0.f;
  w.repetition_penalty = s.has_repetition_penalty() ? s.repetition_penalty()
                                                    : static_cast<float>(d.repetition_penalty.value_or(1.0));
  w.presence_penalty = s.presence_penalty();
  w.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) w.seed = s.seed();
  w.logprobs = request.has_logprobs() ? static_cast<int32_t>(request.logprobs()) : -1;

  out.stop.max_tokens = st.has_max_tokens() ? st.max_tokens() : room;
  out.stop.min_tokens = st.min_tokens();
  out.stop.stop.assign(st.stop().begin(), st.stop().end());
  out.stop.stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  out.stop.ignore_eos = st.ignore_eos();
  out.stop.include_stop_str_in_output = st.include_stop_str_in_output();
  out.stop.skip_special_tokens = request.skip_special_tokens();
  return out;
}

}  // namespace tpserve
