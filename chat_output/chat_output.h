// What a chat model wrote, split into its parts: the reasoning (Qwen3's
// <think>...</think>), the answer, and the tool calls it made in its
// model's format. Works on the streamed text as it comes: every Append
// returns the parts that are final now, so a client streams them as deltas,
// and the deltas of any split of the text add up to the parts of the whole.
//
//   reasoning  kThinkTags: text between <think> and </think> (the tags
//              themselves and the newlines around the answer's start are
//              dropped). The output is in its reasoning from the start when
//              the prompt ends inside an open <think> (starts_in_reasoning),
//              or when it begins with <think> (after whitespace). Output that
//              ends before </think> was all reasoning.
//   tool calls kHermes (Qwen2.5, Qwen3): each call is
//                <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
//              kLlama3Json (Llama 3.1, 3.2): the whole answer is one call
//                {"name": NAME, "parameters": {...}} (or several joined by ";"),
//              the <|python_tag|> before it optional.
//              A call that does not parse (not JSON, no name, arguments not an
//              object, an unclosed tag at the end) is returned as text, never
//              as a broken call. Text between calls that is only whitespace
//              is dropped; other text stays content.
//
// Text that could still become a tag is held back until it cannot
// (streaming never shows half a "<tool_call>" as content); Finish releases
// what is held at the end of the output.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

namespace tpserve {

enum class ReasoningFormat { kNone, kThinkTags };
enum class ToolCallFormat { kNone, kHermes, kLlama3Json };

struct ChatOutputOptions {
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  bool starts_in_reasoning = false;  // the prompt ends inside an open <think>
  ToolCallFormat tool_calls = ToolCallFormat::kNone;
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, compact
  friend bool operator==(const ParsedToolCall&, const ParsedToolCall&) = default;
};

struct ChatOutputParts {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void Add(ChatOutputParts more);  // appends `more`'s parts to these
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputOptions options);
  // The parts of `text` (the next piece of the output) that are final now.
  ChatOutputParts Append(absl::string_view text);
  // The output has ended: everything held back.
  ChatOutputParts Finish();
  // Whether any output needs this parser at all (else text is content as it comes).
  static bool Needed(const ChatOutputOptions& options) {
    return options.reasoning != ReasoningFormat::kNone || options.tool_calls != ToolCallFormat::kNone;
  }

 private:
  void Reason(absl::string_view text, bool final, ChatOutputParts& out);
  void Answer(absl::string_view text, bool final, ChatOutputParts& out);
  void Hermes(bool final, ChatOutputParts& out);
  void Llama3Json(bool final, ChatOutputParts& out);

  const ChatOutputOptions options_;
  enum class Phase { kStart, kReasoning, kAnswerStart, kAnswer } phase_;
  std::string held_;    // reasoning-phase text not yet released (a possible tag)
  std::string answer_;  // answer text not yet released (a possible or open tool call)
  bool reasoning_started_ = false;  // the newlines after <think> are behind
  bool answer_started_ = false;     // Llama 3: the answer's first byte was seen
  bool after_call_ = false;      // Hermes: a call just ended (the whitespace after it is layout)
  bool llama_calls_ = false;     // Llama 3: the answer opened as calls
};

// How a tag-aware parser holds text: the length of the longest suffix of
// `text` that is a proper prefix of `tag` (bytes that may yet become it).
size_t PartialTagSuffix(absl::string_view text, absl::string_view tag);

}  // namespace tpserve
