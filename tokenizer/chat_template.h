// Chat formatting: renders [{role, content}] messages into the prompt text a
// model was trained on, without a Jinja engine. Two formats cover the supported
// families:
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

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

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

}  // namespace tpserve
