// Chat formatting for the Llama 3 header format and ChatML. See chat_template.h.
#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kFlagHelp = "pass --chat-template=llama3 or --chat-template=chatml";

// Jinja's `| trim` on ASCII whitespace.
std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

absl::Status CheckMessages(std::span<const ChatMessage> messages) {
  if (messages.empty()) {
    return absl::InvalidArgumentError("chat: the message list is empty; give at least one message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      std::ostringstream msg;
      msg << "chat: message " << i << " has role \"" << role
          << "\"; supported roles: system, user, assistant";
      return absl::InvalidArgumentError(msg.str());
    }
    if (role == "system" && i != 0) {
      std::ostringstream msg;
      msg << "chat: message " << i << " is a system message; a system message may only be the first";
      return absl::InvalidArgumentError(msg.str());
    }
  }
  return absl::OkStatus();
}

std::string DetectError(const std::filesystem::path& file, std::string_view what) {
  std::ostringstream msg;
  msg << file.string() << ": " << what << "; cannot tell the chat format, " << kFlagHelp;
  return msg.str();
}

}  // namespace

std::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kChatML:
      return "chatml";
  }
  return "unknown";
}

absl::StatusOr<ChatFormat> ParseChatFormatFlag(std::string_view flag) {
  if (flag == "llama3") return ChatFormat::kLlama3;
  if (flag == "chatml") return ChatFormat::kChatML;
  std::ostringstream msg;
  msg << "--chat-template: unknown chat format \"" << flag << "\"; supported: llama3 (Llama 3.x), chatml (Qwen)";
  return absl::InvalidArgumentError(msg.str());
}

absl::StatusOr<ChatFormat> DetectChatFormat(const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "tokenizer_config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(DetectError(file, "cannot open the file"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(DetectError(file, "not a valid JSON object"));
  }
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) {
    return absl::NotFoundError(DetectError(file, "has no \"chat_template\""));
  }
  std::string tmpl;
  if (it->is_string()) {
    tmpl = it->get<std::string>();
  } else if (it->is_array()) {
    // Named templates: [{"name": "default", "template": "..."}, {"name": "tool_use", ...}].
    const Json* chosen = nullptr;
    for (const Json& t : *it) {
      if (!t.is_object() || !t.contains("template") || !t["template"].is_string()) continue;
      if (chosen == nullptr) chosen = &t;
      if (t.contains("name") && t["name"] == "default") {
        chosen = &t;
        break;
      }
    }
    if (chosen == nullptr) {
      return absl::InvalidArgumentError(DetectError(file, "\"chat_template\" lists no {\"template\": ...}"));
    }
    tmpl = (*chosen)["template"].get<std::string>();
  } else {
    return absl::InvalidArgumentError(DetectError(file, "\"chat_template\" is neither a string nor a list"));
  }
  if (tmpl.find("<|start_header_id|>") != std::string::npos) return ChatFormat::kLlama3;
  if (tmpl.find("<|im_start|>") != std::string::npos) return ChatFormat::kChatML;
  return absl::InvalidArgumentError(DetectError(
      file, "\"chat_template\" is neither the Llama 3 header format (<|start_header_id|>) nor ChatML "
            "(<|im_start|>)"));
}

namespace {

// Appends to a segment list, merging adjacent text.
class SegmentWriter {
 public:
  void Control(std::string_view token) { out_.push_back({std::string(token), true}); }
  void Text(std::string_view text) {
    if (text.empty()) return;
    if (out_.empty() || out_.back().control) out_.push_back({std::string(), false});
    out_.back().text += text;
  }
  std::vector<ChatSegment> Take() { return std::move(out_); }

 private:
  std::vector<ChatSegment> out_;
};

}  // namespace

absl::StatusOr<std::vector<ChatSegment>> RenderChatSegments(ChatFormat format,
                                                            std::span<const ChatMessage> messages,
                                                            bool add_generation_prompt) {
  if (absl::Status s = CheckMessages(messages); !s.ok()) return s;
  SegmentWriter w;
  switch (format) {
    case ChatFormat::kLlama3:
      w.Control("<|begin_of_text|>");
      for (const ChatMessage& m : messages) {
        w.Control("<|start_header_id|>");
        w.Text(m.role);
        w.Control("<|end_header_id|>");
        w.Text("\n\n");
        w.Text(Trim(m.content));
        w.Control("<|eot_id|>");
      }
      if (add_generation_prompt) {
        w.Control("<|start_header_id|>");
        w.Text("assistant");
        w.Control("<|end_header_id|>");
        w.Text("\n\n");
      }
      break;
    case ChatFormat::kChatML:
      for (const ChatMessage& m : messages) {
        w.Control("<|im_start|>");
        w.Text(m.role);
        w.Text("\n");
        w.Text(m.content);
        w.Control("<|im_end|>");
        w.Text("\n");
      }
      if (add_generation_prompt) {
        w.Control("<|im_start|>");
        w.Text("assistant\n");
      }
      break;
  }
  return w.Take();
}

absl::StatusOr<std::string> RenderChat(ChatFormat format, std::span<const ChatMessage> messages,
                                       bool add_generation_prompt) {
  absl::StatusOr<std::vector<ChatSegment>> segments = RenderChatSegments(format, messages, add_generation_prompt);
  if (!segments.ok()) return segments.status();
  std::string out;
  for (const ChatSegment& s : *segments) out += s.text;
  return out;
}

}  // namespace tpserve
