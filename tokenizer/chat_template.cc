// Chat formatting for the Llama 3 header format and ChatML. See chat_template.h.
#include "tokenizer/chat_template.h"

#include <array>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

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

// Errors start with the request's field path and ": " (coordinator/request.h).
absl::Status CheckMessages(std::span<const ChatMessage> messages) {
  if (messages.empty()) {
    return absl::InvalidArgumentError("chat.messages: is empty; give at least one message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("chat.messages[", i, "].role: \"", role,
                                                     "\" is not one of system, user, assistant (all the "
                                                     "built-in chat formats take)"));
    }
    if (role == "system" && i != 0) {
      return absl::InvalidArgumentError(absl::StrCat("chat.messages[", i, "].role: a system message may only be ",
                                                     "the first; move it to the front"));
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

namespace {

// tokenizer_config.json as a JSON object, and its "chat_template": a string, or a list
// of {"name", "template"} where "default" or the first is used. `file` names it in errors.
absl::StatusOr<std::string> ReadChatTemplateSource(const std::filesystem::path& file, Json* config) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(DetectError(file, "cannot open the file"));
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(DetectError(file, "not a valid JSON object"));
  }
  if (config != nullptr) *config = j;
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
  return tmpl;
}

}  // namespace

absl::StatusOr<ChatFormat> DetectChatFormat(const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "tokenizer_config.json";
  absl::StatusOr<std::string> tmpl = ReadChatTemplateSource(file, nullptr);
  if (!tmpl.ok()) return tmpl.status();
  if (tmpl->find("<|start_header_id|>") != std::string::npos) return ChatFormat::kLlama3;
  if (tmpl->find("<|im_start|>") != std::string::npos) return ChatFormat::kChatML;
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

std::vector<int32_t> EncodeChatSegments(std::span<const ChatSegment> segments, const Tokenizer& tokenizer,
                                        bool allow_special_tokens) {
  const SpecialTokensInText specials =
      allow_special_tokens ? SpecialTokensInText::kMatch : SpecialTokensInText::kAsText;
  std::vector<int32_t> ids;
  std::string text;
  auto flush = [&] {
    const std::vector<int32_t> part = tokenizer.Encode(text, /*add_special_tokens=*/false, specials);
    ids.insert(ids.end(), part.begin(), part.end());
    text.clear();
  };
  for (const ChatSegment& seg : segments) {
    std::optional<int32_t> id = seg.control ? tokenizer.TokenToId(seg.text) : std::nullopt;
    if (!id.has_value()) {
      text += seg.text;  // a control token this tokenizer lacks stays text
      continue;
    }
    flush();
    ids.push_back(*id);
  }
  flush();
  return ids;
}

// ---- ChatTemplate: the checkpoint's Jinja2 template or a built-in format ----

namespace {

using OJson = nlohmann::ordered_json;

// Appends a run the template wrote: its control tokens (longest match first)
// become control segments, the rest text.
void AppendTrusted(std::string_view s, const std::vector<std::string>& controls, SegmentWriter& w) {
  std::array<bool, 256> first{};
  for (const std::string& c : controls) {
    if (!c.empty()) first[static_cast<unsigned char>(c[0])] = true;
  }
  size_t text_begin = 0;
  for (size_t i = 0; i < s.size();) {
    const std::string* hit = nullptr;
    if (first[static_cast<unsigned char>(s[i])]) {
      for (const std::string& c : controls) {
        if (!c.empty() && s.compare(i, c.size(), c) == 0 && (hit == nullptr || c.size() > hit->size())) hit = &c;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    w.Text(s.substr(text_begin, i - text_begin));
    w.Control(*hit);
    i += hit->size();
    text_begin = i;
  }
  w.Text(s.substr(text_begin));
}

// The built-in formats take role and content only; anything else in the request
// is refused rather than silently dropped.
absl::StatusOr<std::vector<ChatMessage>> BuiltinMessages(const ChatInput& in, ChatFormat format) {
  const std::string hint = absl::StrCat(" (this model uses the built-in ", std::string(ChatFormatName(format)),
                                        " chat format; give --chat-template FILE with a Jinja2 template that has it)");
  if (!in.tools.is_null() && !(in.tools.is_array() && in.tools.empty())) {
    return absl::InvalidArgumentError("chat.tools_json: tools are not supported" + hint);
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < in.messages.size(); ++i) {
    const OJson& m = in.messages[i];
    const std::string field = absl::StrCat("chat.messages[", i, "]");
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(field + ": a message needs a string role");
    }
    if (m.contains("tool_calls") && !m["tool_calls"].empty()) {
      return absl::InvalidArgumentError(field + ".tool_calls: tool calls are not supported" + hint);
    }
    const OJson content = m.value("content", OJson(""));
    if (!content.is_string() && !content.is_null()) {
      return absl::InvalidArgumentError(field + ".content: must be a string");
    }
    out.push_back({m["role"].get<std::string>(), content.is_null() ? "" : content.get<std::string>()});
  }
  return out;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromJinja(std::string_view source, nlohmann::ordered_json special_tokens,
                                                     std::vector<std::string> control_tokens) {
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) return absl::InvalidArgumentError("chat template " + std::string(t.status().message()));
  ChatTemplate out;
  out.jinja_ = std::make_shared<const jinja::Template>(*std::move(t));
  out.source_ = std::make_shared<const std::string>(source);
  out.special_tokens_ = special_tokens.is_object() ? std::move(special_tokens) : OJson::object();
  out.control_tokens_ = std::make_shared<const std::vector<std::string>>(std::move(control_tokens));
  return out;
}

std::string_view ChatTemplate::name() const { return jinja_ ? "jinja" : ChatFormatName(format_); }

absl::StatusOr<std::vector<ChatSegment>> ChatTemplate::RenderSegments(const ChatInput& input) const {
  if (jinja_ == nullptr) {
    absl::StatusOr<std::vector<ChatMessage>> messages = BuiltinMessages(input, format_);
    if (!messages.ok()) return messages.status();
    return RenderChatSegments(format_, *messages, input.add_generation_prompt);
  }
  if (!input.kwargs.is_object()) return absl::InvalidArgumentError("chat.chat_template_kwargs: must be a map");
  OJson data = input.kwargs;
  for (std::string_view reserved : {"messages", "tools", "documents", "add_generation_prompt"}) {
    if (data.contains(reserved)) {
      return absl::InvalidArgumentError(absl::StrCat("chat.chat_template_kwargs: \"", std::string(reserved),
                                                     "\" is set by the request itself; remove it"));
    }
  }
  data["messages"] = input.messages;
  data["tools"] = input.tools;
  data["documents"] = nullptr;
  data["add_generation_prompt"] = input.add_generation_prompt;
  OJson trusted = OJson::object();
  for (const auto& [k, v] : special_tokens_.items()) {
    if (!data.contains(k)) trusted[k] = v;  // a request's kwarg overrides, as data
  }
  absl::StatusOr<jinja::Text> text = jinja_->Render(data, trusted);
  if (!text.ok()) return text.status();  // InvalidArgument: the template's message, or "line N: ..."
  SegmentWriter w;
  size_t begin = 0;
  for (const jinja::Text::Run& run : text->runs()) {
    const std::string_view piece = std::string_view(text->str()).substr(begin, run.end - begin);
    if (run.trusted) {
      AppendTrusted(piece, *control_tokens_, w);
    } else {
      w.Text(piece);
    }
    begin = run.end;
  }
  return w.Take();
}

namespace {

// transformers' special_tokens_map from tokenizer_config.json: bos/eos/unk/pad as
// strings ({"content": ...} objects unwrapped), unset ones left out.
OJson SpecialTokensMap(const Json& config) {
  OJson out = OJson::object();
  auto content = [](const Json& v) -> std::optional<std::string> {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return std::nullopt;
  };
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!config.contains(key)) continue;
    if (std::optional<std::string> c = content(config[key])) out[key] = *c;
  }
  return out;
}

std::vector<std::string> ControlTokens(const Tokenizer& tokenizer) {
  std::vector<std::string> out;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.IsSpecial(id)) continue;
    const int32_t ids[1] = {id};
    absl::StatusOr<std::string> text = tokenizer.Decode(ids, /*skip_special_tokens=*/false);
    if (text.ok() && !text->empty()) out.push_back(*std::move(text));
  }
  return out;
}

}  // namespace

absl::StatusOr<ChatTemplate> LoadChatTemplate(const std::filesystem::path& model_dir, std::string_view flag,
                                              const Tokenizer& tokenizer) {
  if (flag == "llama3" || flag == "chatml") {
    absl::StatusOr<ChatFormat> f = ParseChatFormatFlag(flag);
    if (!f.ok()) return f.status();
    return ChatTemplate(*f);
  }
  const std::filesystem::path config_file = model_dir / "tokenizer_config.json";
  Json config = Json::object();
  absl::StatusOr<std::string> source = ReadChatTemplateSource(config_file, &config);
  std::string origin = config_file.string();
  if (flag != "auto") {
    std::ifstream in{std::string(flag), std::ios::binary};
    if (!in) {
      return absl::NotFoundError(absl::StrCat("--chat-template: cannot read \"", std::string(flag),
                                              "\"; give auto, llama3, chatml or a Jinja2 template file"));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    source = ss.str();
    origin = std::string(flag);
  }
  if (!source.ok()) return source.status();
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromJinja(*source, SpecialTokensMap(config), ControlTokens(tokenizer));
  if (!t.ok()) return absl::InvalidArgumentError(origin + ": " + std::string(t.status().message()));
  return t;
}

}  // namespace tpserve
