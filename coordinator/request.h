// A public Generate request checked and turned into what the engine loop runs:
// prompt token ids, the sampling parameters (defaults resolved) and the stop
// parameters.
//
// Every rejection is INVALID_ARGUMENT whose message starts with the request
// field it is about (proto names: "prompt", "prompt_token_ids.ids[3]",
// "chat.messages[1].role", "sampling.temperature", "stopping.max_tokens",
// "stopping.stop", "logprobs", ...) and says what is accepted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/output_processor.h"
#include "model/config.h"
#include "sampling/limits.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tpserve/v1/generation.pb.h"

namespace tpserve {

// What a request may ask for; fixed when the coordinator starts.
struct RequestLimits {
  int32_t vocab_size = 0;         // token ids must be below this
  int64_t max_model_len = 0;      // prompt + generated tokens
  int32_t max_logprobs = kMaxLogprobs;  // alternatives per token (at most kMaxLogprobs)
  GenerationDefaults defaults;    // generation_config.json, for unset sampling fields
};

struct PreparedRequest {
  std::vector<int32_t> prompt;  // [num_prompt_tokens] token ids
  SamplingParams sampling;      // defaults resolved; logprobs -1 = none
  StopParams stop;              // max_tokens resolved (> 0)
};

// Checks the fields that need no tokenization (sampling, stopping, logprobs,
// token ids, chat roles); the prompt length is checked by PrepareRequest.
absl::Status ValidateRequestFields(const tpserve::v1::GenerateRequest& request,
                                   const RequestLimits& limits);

// Tokenizes the chat: rendered with `chat_template` (the checkpoint's Jinja2
// template or a built-in format; tools, tool calls, reasoning_content and
// chat_template_kwargs go to the template), encoded without adding special tokens
// (the rendering carries them). A template's raise_exception, malformed tools_json or
// kwargs are INVALID_ARGUMENT quoting what went wrong. The template's control tokens are
// real special tokens; special-token text inside the messages' content is plain
// text unless allow_special_tokens (the request's allow_special_tokens_in_input).
absl::StatusOr<std::vector<int32_t>> EncodeChat(const tpserve::v1::Chat& chat,
                                                const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                                bool allow_special_tokens = false);

// The ids a Tokenize call answers, encoded as Generate would: a chat as EncodeChat,
// text with the request's add_special_tokens; special-token text in the input is
// plain text unless allow_special_tokens_in_input. `format` is the model's chat
// format, or why it is unknown (a chat input is then INVALID_ARGUMENT).
absl::StatusOr<std::vector<int32_t>> EncodeTokenizeRequest(const tpserve::v1::TokenizeRequest& request,
                                                           const Tokenizer& tokenizer,
                                                           const absl::StatusOr<ChatTemplate>& format);

// Validates, tokenizes (a text prompt with add_special_tokens = true; special-token
// text in the prompt or chat content is plain text unless the request's
// allow_special_tokens_in_input) and resolves defaults: max_tokens defaults to
// what is left of max_model_len.
absl::StatusOr<PreparedRequest> PrepareRequest(const tpserve::v1::GenerateRequest& request,
                                               const Tokenizer& tokenizer, const ChatTemplate& format,
                                               const RequestLimits& limits);

}  // namespace tpserve
