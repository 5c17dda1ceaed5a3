// Chat formatting: renders messages into the prompt text a model was trained on.
//
// ChatTemplate (at the end of this header) is what the coordinator uses: the
// checkpoint's own Jinja2 `chat_template` from tokenizer_config.json, rendered by
// jinja/template.h as transformers would, or -- for a checkpoint without one --
// one of two built-in formats:
//
//   kLlama3 (Llama 3, 3.1, 3.2 instruct)
//     <|begin_of_text|>
//     per message: <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>
//     generation prompt: <|start_header_id|>assistant<|end_header_id|>\n\n
//   The rendered text already starts with <|begin_of_text|>: encode it with
//   add_special_tokens = false, or the BOS token appears twice.
//   Content is trimmed of leading/trailing ASCII whitespace (Jinja's `| trim`).
//
//   kChatML (Qwen2, Qwen3)
//     per message: <|im_start|>{role}\n{content}<|im_end|>\n
//     generation prompt: <|im_start|>assistant\n
//   Content is kept verbatim. Qwen adds no BOS; encode with add_special_tokens = false too.
//
// Roles are "system", "user" and "assistant"; a system message may only come first.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/template.h"
#include "nlohmann/json.hpp"

namespace tpserve {

class Tokenizer;

enum class ChatFormat { kLlama3, kChatML };

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

std::string_view ChatFormatName(ChatFormat format);  // "llama3" | "chatml"

// The value of a --chat-template flag: "llama3" or "chatml".
absl::StatusOr<ChatFormat> ParseChatFormatFlag(std::string_view flag);

// Detects the format from <model_dir>/tokenizer_config.json's "chat_template"
// (a string, or a list of {"name", "template"} where "default" or the first is used):
// <|start_header_id|> means Llama 3, <|im_start|> means ChatML. A missing file or
// template, or an unrecognised one, is an error that says to pass --chat-template.
absl::StatusOr<ChatFormat> DetectChatFormat(const std::filesystem::path& model_dir);

// Renders the conversation; with add_generation_prompt the assistant header that
// starts the model's reply is appended. An empty list, an unknown role or a system
// message after the first is InvalidArgument.
absl::StatusOr<std::string> RenderChat(ChatFormat format, std::span<const ChatMessage> messages,
                                       bool add_generation_prompt = true);

// One piece of a rendered conversation. The template's own control tokens
// (<|begin_of_text|>, <|start_header_id|>, <|eot_id|>, <|im_start|>, <|im_end|>)
// are segments of their own; everything between them (role names, newlines, the
// messages' content) is one text segment, so that a caller can encode the text
// with special tokens disabled and still get the real control tokens.
struct ChatSegment {
  std::string text;
  bool control = false;  // true: exactly one of the template's control tokens
};

// The same rendering as RenderChat, as segments whose texts concatenate to it;
// no two text segments are adjacent and none is empty.
absl::StatusOr<std::vector<ChatSegment>> RenderChatSegments(ChatFormat format,
                                                            std::span<const ChatMessage> messages,
                                                            bool add_generation_prompt = true);

// Token ids of a rendering: each control segment is its token's id (one the
// tokenizer lacks stays text); the text between control tokens is encoded in one
// piece, as encoding the whole rendering would, with special-token text in it
// ("<|im_end|>" written in a message) matched only when allow_special_tokens.
// No BOS is added: the rendering carries it.
std::vector<int32_t> EncodeChatSegments(std::span<const ChatSegment> segments, const Tokenizer& tokenizer,
                                        bool allow_special_tokens);

// A chat request as the templates see it (the variables transformers'
// apply_chat_template passes, in OpenAI's shapes).
struct ChatInput {
  // [{"role", "content", optional "reasoning_content", "tool_calls": [{"type", "function":
  //   {"name", "arguments"}}], "tool_call_id", "name"}]
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools = nullptr;  // [tool JSON schema, ...] or null
  // chat_template_kwargs: extra variables, e.g. {"enable_thinking": false}. They are
  // data (untrusted), and override the tokenizer's special tokens of the same name.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
};

// How a model's chats are rendered: its Jinja2 chat template, or a built-in format.
// Cheap to copy; safe to use from several threads at once.
class ChatTemplate {
 public:
  // A built-in format (implicit, so a ChatFormat can be passed where a ChatTemplate is wanted).
  ChatTemplate(ChatFormat format) : format_(format) {}  // NOLINT(google-explicit-constructor)

  // A Jinja2 template. `special_tokens`: the tokenizer's bos_token, eos_token, ...
  // (trusted variables). `control_tokens`: the special tokens' texts; where the
  // template itself writes one, it becomes a control segment. InvalidArgument
  // naming the construct and line when the template uses something unsupported.
  static absl::StatusOr<ChatTemplate> FromJinja(std::string_view source, nlohmann::ordered_json special_tokens,
                                                std::vector<std::string> control_tokens);

  // "llama3", "chatml" or "jinja".
  std::string_view name() const;
  // The Jinja2 template's text ("" for a built-in format): what the model's
  // output looks like can be read from it (tool-call tags, <think>).
  std::string_view source() const { return source_ ? std::string_view(*source_) : std::string_view(); }

  // Renders as segments (see ChatSegment): control segments are control tokens the
  // template wrote; text from the request's data -- even "<|im_end|>" written in a
  // message -- is always in text segments. Errors are InvalidArgument: the
  // template's raise_exception message, a template error on this input ("line N:
  // ..."), or, for a built-in format, a request it cannot express (tools, tool calls,
  // roles other than system/user/assistant).
  absl::StatusOr<std::vector<ChatSegment>> RenderSegments(const ChatInput& input) const;

 private:
  ChatTemplate() = default;
  ChatFormat format_ = ChatFormat::kChatML;
  std::shared_ptr<const jinja::Template> jinja_;  // null: the built-in format_
  std::shared_ptr<const std::string> source_;     // jinja_'s text
  nlohmann::ordered_json special_tokens_;
  std::shared_ptr<const std::vector<std::string>> control_tokens_;
};

// The chat template for a model folder and a --chat-template flag value:
//   "auto"            the checkpoint's chat_template (tokenizer_config.json); NotFound when
//                     it has none (pass llama3 or chatml then)
//   "llama3"/"chatml" a built-in format
//   anything else     a file holding a Jinja2 chat template, overriding the checkpoint's
// Special tokens come from tokenizer_config.json and `tokenizer`. A template using an
// unsupported construct is InvalidArgument naming it and its line.
absl::StatusOr<ChatTemplate> LoadChatTemplate(const std::filesystem::path& model_dir, std::string_view flag,
                                              const Tokenizer& tokenizer);

}  // namespace tpserve
