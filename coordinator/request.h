// A public Generate request checked and turned into what the engine loop runs:
// prompt token ids, the sampling parameters (defaults resolved) and the stop
// parameters.
//
// Every rejection is INVALID_ARGUMENT whose message starts with the request
// field it is about (proto names: "prompt", "prompt_token_ids.ids[3]",
// "chat.messages[1].role", "sampling.temperature", "stopping.max_tokens",
// "stopping.stop[0]", "logprobs", ...), then ": ", then says what is accepted.
// tpserve-http maps that path to OpenAI's `param` (http/OpenAiParam).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "constrained/constraint_compiler.h"
#include "coordinator/output_processor.h"
#include "model/config.h"
#include "sampling/limits.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tpserve/v1/generation.pb.h"

namespace tpserve {

// A chat's messages by default (--max-chat-messages): OpenAI's own API takes
// at most 2,048. Each costs a few KB while it is rendered, so the bound keeps
// one request's rendering to megabytes (a 100,000-message chat cost ~200 MB).
inline constexpr int32_t kDefaultMaxChatMessages = 2048;
// The JSON a chat carries (tools_json, tool call arguments and
// chat_template_kwargs) is parsed with these bounds, checked while parsing:
// at most this many values in all (a tool schema has tens to hundreds; a
// million tiny ones cost ~350 MB to render) ...
inline constexpr int64_t kMaxChatJsonValues = 65536;
// ... nested at most this deep (nlohmann's copy, dump and == recurse, and the
// template engine takes at most jinja::Value::kMaxJsonDepth with the messages
// around them).
inline constexpr int kMaxChatJsonDepth = 64;

// What a request may ask for; fixed when the coordinator starts.
struct RequestLimits {
  int32_t vocab_size = 0;         // token ids must be below this
  int64_t max_model_len = 0;      // prompt + generated tokens
  int32_t max_logprobs = kMaxLogprobs;  // alternatives per token (at most kMaxLogprobs)
  GenerationDefaults defaults;    // generation_config.json, for unset sampling fields
  int32_t max_chat_messages = kDefaultMaxChatMessages;  // --max-chat-messages (>= 1)
  // Compiles constrained output (structured_output, tool_choice REQUIRED /
  // FUNCTION) against the model's vocabulary to validate it: a constraint
  // the grammar engine refuses, or one past its limits, is INVALID_ARGUMENT
  // naming the field. Not owned. nullptr: constrained output is refused.
  ConstraintCompiler* constraints = nullptr;
};

// Choices one request may ask for (GenerateRequest.n), as OpenAI's n.
inline constexpr int32_t kMaxChoices = 128;

struct PreparedRequest {
  std::vector<int32_t> prompt;  // [num_prompt_tokens] token ids
  int32_t n = 1;                // choices (parallel sampling), 1..kMaxChoices
  SamplingParams sampling;      // defaults resolved; logprobs -1 = none; the constraint, compiled once
  StopParams stop;              // max_tokens resolved (> 0)
  bool speculate = true;        // false: GenerateRequest.disable_speculation
  // [prompt.size() / block_size] the prefix-cache hash of each full prompt
  // block (BlockManager::ExtendBlockHashes), computed once before routing:
  // the data-parallel router looks them up and the group's scheduler and
  // block manager take them as they are (EngineGroups::Submit). Empty: the
  // group's scheduler hashes the prompt itself.
  std::vector<uint64_t> block_hashes;
};

// Checks the fields that need no tokenization (sampling, stopping, logprobs,
// token ids, chat roles, the number of chat messages); the prompt length is
// checked by PrepareRequest.
absl::Status ValidateRequestFields(const tpserve::v1::GenerateRequest& request,
                                   const RequestLimits& limits);

// Tokenizes the chat: rendered with `chat_template` (the checkpoint's Jinja2
// template or a built-in format; tools, tool calls, reasoning_content and
// chat_template_kwargs go to the template), encoded without adding special tokens
// (the rendering carries them). More than `max_messages` messages, JSON past
// kMaxChatJsonValues or kMaxChatJsonDepth (refused before anything is
// rendered), a template's raise_exception, malformed tools_json or kwargs are
// INVALID_ARGUMENT naming the field and quoting what went wrong. The template's
// control tokens are real special tokens; special-token text inside the
// messages' content is plain text unless allow_special_tokens (the request's
// allow_special_tokens_in_input).
absl::StatusOr<std::vector<int32_t>> EncodeChat(const tpserve::v1::Chat& chat,
                                                const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                                bool allow_special_tokens = false,
                                                int32_t max_messages = kDefaultMaxChatMessages);

// The ids a Tokenize call answers, encoded as Generate would: a chat as EncodeChat,
// text with the request's add_special_tokens; special-token text in the input is
// plain text unless allow_special_tokens_in_input. `format` is the model's chat
// format, or why it is unknown (a chat input is then INVALID_ARGUMENT).
absl::StatusOr<std::vector<int32_t>> EncodeTokenizeRequest(const tpserve::v1::TokenizeRequest& request,
                                                           const Tokenizer& tokenizer,
                                                           const absl::StatusOr<ChatTemplate>& format,
                                                           int32_t max_chat_messages = kDefaultMaxChatMessages);

// Validates, tokenizes (a text prompt with add_special_tokens = true; special-token
// text in the prompt or chat content is plain text unless the request's
// allow_special_tokens_in_input) and resolves defaults: max_tokens defaults to
// what is left of max_model_len.
absl::StatusOr<PreparedRequest> PrepareRequest(const tpserve::v1::GenerateRequest& request,
                                               const Tokenizer& tokenizer, const ChatTemplate& format,
                                               const RequestLimits& limits);

}  // namespace tpserve
