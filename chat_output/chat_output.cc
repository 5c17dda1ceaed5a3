#include "chat_output/chat_output.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "json/strict_json.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";
constexpr absl::string_view kToolCallOpen = "<tool_call>";
constexpr absl::string_view kToolCallClose = "</tool_call>";
constexpr absl::string_view kPythonTag = "<|python_tag|>";
// A model's tool call is JSON it wrote: parsed within these bounds (its
// arguments are dumped again, recursively).
constexpr JsonLimits kCallLimits{.max_depth = 64, .max_values = 1 << 16};

// std::string and absl::string_view (Debian's abseil has its own) together.
size_t Find(const std::string& s, absl::string_view t, size_t from = 0) { return s.find(t.data(), from, t.size()); }
void AppendTo(std::string& s, absl::string_view t) { s.append(t.data(), t.size()); }

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// `body` as a call: {"name": NAME, ARGS_KEY: {...}}; false when it is not one.
bool ParseCall(absl::string_view body, absl::string_view args_key, ParsedToolCall* call) {
  absl::StatusOr<nlohmann::ordered_json> j = ParseJson<nlohmann::ordered_json>(body, kCallLimits);
  if (!j.ok() || !j->is_object()) return false;
  const auto name = j->find("name");
  const auto args = j->find(args_key);
  if (name == j->end() || !name->is_string() || name->get<std::string>().empty()) return false;
  if (args == j->end() || !args->is_object()) return false;
  *call = {name->get<std::string>(), args->dump()};
  return true;
}

// The end of the JSON object starting at text[start] ('{'), past its closing
// brace, strings and escapes respected; npos when it does not close.
size_t ObjectEnd(absl::string_view text, size_t start) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return absl::string_view::npos;
}

}  // namespace

size_t PartialTagSuffix(absl::string_view text, absl::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (tag.substr(0, n) == text.substr(text.size() - n)) return n;
  }
  return 0;
}

void ChatOutputParts::Add(ChatOutputParts more) {
  reasoning += more.reasoning;
  content += more.content;
  for (ParsedToolCall& c : more.tool_calls) tool_calls.push_back(std::move(c));
}

ChatOutputParser::ChatOutputParser(ChatOutputOptions options)
    : options_(options),
      phase_(options.reasoning == ReasoningFormat::kNone ? Phase::kAnswer
             : options.starts_in_reasoning               ? Phase::kReasoning
                                                         : Phase::kStart) {}

ChatOutputParts ChatOutputParser::Append(absl::string_view text) {
  ChatOutputParts out;
  if (phase_ == Phase::kAnswer || phase_ == Phase::kAnswerStart) {
    Answer(text, /*final=*/false, out);
  } else {
    Reason(text, /*final=*/false, out);
  }
  return out;
}

ChatOutputParts ChatOutputParser::Finish() {
  ChatOutputParts out;
  if (phase_ == Phase::kAnswer || phase_ == Phase::kAnswerStart) {
    Answer({}, /*final=*/true, out);
  } else {
    Reason({}, /*final=*/true, out);
  }
  return out;
}

// Before the answer: whether the output opens with <think>, then the
// reasoning up to </think>. Newlines right after <think> and right before
// </think> are the template's layout, not reasoning: held until it is known
// which they are.
void ChatOutputParser::Reason(absl::string_view text, bool final, ChatOutputParts& out) {
  AppendTo(held_, text);
  if (phase_ == Phase::kStart) {
    const absl::string_view t = absl::StripLeadingAsciiWhitespace(held_);
    if (absl::StartsWith(t, kThinkOpen)) {
      held_ = std::string(t.substr(kThinkOpen.size()));
      phase_ = Phase::kReasoning;
    } else if (absl::StartsWith(kThinkOpen, t) && !final) {
      return;  // may still open
    } else {
      phase_ = Phase::kAnswer;  // no reasoning: all of it is the answer, as written
      return Answer(std::exchange(held_, std::string()), final, out);
    }
  }
  if (!reasoning_started_) {  // the newlines right after <think>
    const size_t first = held_.find_first_not_of('\n');
    held_.erase(0, first == std::string::npos ? held_.size() : first);
    if (first == std::string::npos && !final) return;
    reasoning_started_ = true;
  }
  const size_t close = Find(held_, kThinkClose);
  if (close != std::string::npos) {
    std::string reasoning = held_.substr(0, close);
    while (!reasoning.empty() && reasoning.back() == '\n') reasoning.pop_back();
    out.reasoning += reasoning;
    std::string rest = held_.substr(close + kThinkClose.size());
    held_.clear();
    phase_ = Phase::kAnswerStart;
    return Answer(rest, final, out);
  }
  size_t keep = final ? 0 : PartialTagSuffix(held_, kThinkClose);
  if (!final) {  // trailing newlines may be the layout before </think>
    while (keep < held_.size() && held_[held_.size() - keep - 1] == '\n') ++keep;
  }
  out.reasoning += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

// The answer: newlines that open it are the template's layout; then the
// content, with tool calls taken out in the model's format.
void ChatOutputParser::Answer(absl::string_view text, bool final, ChatOutputParts& out) {
  if (phase_ == Phase::kAnswerStart) {
    while (!text.empty() && text.front() == '\n') text.remove_prefix(1);
    if (text.empty() && !final) return;
    phase_ = Phase::kAnswer;
  }
  AppendTo(answer_, text);
  switch (options_.tool_calls) {
    case ToolCallFormat::kNone:
      out.content += std::exchange(answer_, std::string());
      return;
    case ToolCallFormat::kHermes:
      return Hermes(final, out);
    case ToolCallFormat::kLlama3Json:
      return Llama3Json(final, out);
  }
}

// <tool_call>JSON</tool_call> blocks anywhere in the answer. Whitespace next
// to a call is its layout and dropped, so trailing whitespace is held until
// it is known not to be; an unclosed (at the end) or malformed block is text.
void ChatOutputParser::Hermes(bool final, ChatOutputParts& out) {
  constexpr absl::string_view kSpace = " \n\t\r";
  for (;;) {
    if (after_call_) {
      const size_t text = answer_.find_first_not_of(kSpace.data(), 0, kSpace.size());
      answer_.erase(0, text == std::string::npos ? answer_.size() : text);
      if (text == std::string::npos) return;
      after_call_ = false;
    }
    const size_t open = Find(answer_, kToolCallOpen);
    if (open == std::string::npos) break;
    const size_t close = Find(answer_, kToolCallClose, open + kToolCallOpen.size());
    if (close == std::string::npos && final) break;  // never closed: text, below
    // The text before the call goes out now; the whitespace next to it waits
    // for the call's verdict (layout if it parses, text if not).
    const size_t text = absl::StripTrailingAsciiWhitespace(absl::string_view(answer_).substr(0, open)).size();
    out.content.append(answer_, 0, text);
    answer_.erase(0, text);
    if (close == std::string::npos) return;  // a call in progress
    const size_t tag = open - text, body_end = close - text;
    const absl::string_view body =
        absl::string_view(answer_).substr(tag + kToolCallOpen.size(), body_end - tag - kToolCallOpen.size());
    ParsedToolCall call;
    if (ParseCall(body, "arguments", &call)) {
      out.tool_calls.push_back(std::move(call));
      after_call_ = true;
    } else {
      out.content += answer_.substr(0, body_end + kToolCallClose.size());
    }
    answer_.erase(0, body_end + kToolCallClose.size());
  }
  size_t keep = final ? 0 : PartialTagSuffix(answer_, kToolCallOpen);
  if (!final) {
    while (keep < answer_.size() && IsSpace(answer_[answer_.size() - keep - 1])) ++keep;
  }
  out.content += answer_.substr(0, answer_.size() - keep);
  answer_.erase(0, answer_.size() - keep);
}

// Llama 3.x: the answer is calls ({"name", "parameters"} objects joined by
// ";", after an optional <|python_tag|>) or it is text. Decided at its first
// byte that is not whitespace; calls are parsed once the output ends.
void ChatOutputParser::Llama3Json(bool final, ChatOutputParts& out) {
  absl::string_view t = absl::StripLeadingAsciiWhitespace(answer_);
  if (!answer_started_) {
    const bool maybe_tag = !t.empty() && absl::StartsWith(kPythonTag, t.substr(0, kPythonTag.size())) &&
                           t.size() < kPythonTag.size();
    if ((t.empty() || maybe_tag) && !final) return;
    answer_started_ = true;
    llama_calls_ = absl::StartsWith(t, "{") || absl::StartsWith(t, kPythonTag);
  }
  if (!llama_calls_) {
    out.content += std::exchange(answer_, std::string());
    return;
  }
  if (!final) return;
  absl::ConsumePrefix(&t, kPythonTag);
  std::vector<ParsedToolCall> calls;
  size_t at = 0;
  for (;;) {
    while (at < t.size() && (IsSpace(t[at]) || (t[at] == ';' && !calls.empty()))) ++at;
    if (at >= t.size()) break;
    const size_t end = t[at] == '{' ? ObjectEnd(t, at) : absl::string_view::npos;
    ParsedToolCall call;
    if (end == absl::string_view::npos ||
        !(ParseCall(t.substr(at, end - at), "parameters", &call) ||
          ParseCall(t.substr(at, end - at), "arguments", &call))) {
      calls.clear();
      break;
    }
    calls.push_back(std::move(call));
    at = end;
  }
  if (calls.empty()) {
    out.content += std::exchange(answer_, std::string());
  } else {
    answer_.clear();
    for (ParsedToolCall& c : calls) out.tool_calls.push_back(std::move(c));
  }
}

}  // namespace tpserve
