// libFuzzer target: RenderChat / RenderChatSegments with fuzzed formats, roles and
// contents. Built only with -DTPSERVE_FUZZ=ON by clang (scripts/fuzz.sh).
//
// Input (FuzzedDataProvider): format, add_generation_prompt, then messages, each a
// role (system / user / assistant, or arbitrary bytes) and arbitrary content.
// Invariants (tokenizer/chat_template.h):
//  * a list is rejected, with InvalidArgument, exactly when it is empty, has a role
//    other than system / user / assistant, or a system message after the first;
//  * an accepted one renders as the reference below, written from the header's
//    description of the two formats;
//  * the segments concatenate to RenderChat's text, no text segment is empty or next
//    to another, control segments are the template's tokens, and there are exactly as
//    many as the template has: content can never turn into a control segment.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tests/testing/fuzz_check.h"
#include "tokenizer/chat_template.h"

namespace {

using tpserve::ChatFormat;
using tpserve::ChatMessage;

bool Acceptable(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant") return false;
    if (r == "system" && i > 0) return false;
  }
  return true;
}

std::string_view TrimAscii(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

// The expected rendering and its number of control tokens.
std::string Reference(ChatFormat format, const std::vector<ChatMessage>& messages, bool gen, size_t& controls) {
  std::string out;
  if (format == ChatFormat::kLlama3) {
    out = "<|begin_of_text|>";
    for (const ChatMessage& m : messages) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      out += TrimAscii(m.content);
      out += "<|eot_id|>";
    }
    if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    controls = 1 + 3 * messages.size() + (gen ? 2 : 0);
  } else {
    for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (gen) out += "<|im_start|>assistant\n";
    controls = 2 * messages.size() + (gen ? 1 : 0);
  }
  return out;
}

bool IsControlToken(ChatFormat format, std::string_view s) {
  if (format == ChatFormat::kLlama3) {
    return s == "<|begin_of_text|>" || s == "<|start_header_id|>" || s == "<|end_header_id|>" || s == "<|eot_id|>";
  }
  return s == "<|im_start|>" || s == "<|im_end|>";
}

void CheckSegments(ChatFormat format, const std::vector<tpserve::ChatSegment>& segments, const std::string& text,
                   size_t expected_controls) {
  std::string joined;
  size_t controls = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const tpserve::ChatSegment& s = segments[i];
    if (s.control) {
      TPSERVE_FUZZ_CHECK(IsControlToken(format, s.text));
      ++controls;
    } else {
      TPSERVE_FUZZ_CHECK(!s.text.empty());
      TPSERVE_FUZZ_CHECK(i == 0 || segments[i - 1].control);
    }
    joined += s.text;
  }
  TPSERVE_FUZZ_CHECK(joined == text);
  TPSERVE_FUZZ_CHECK(controls == expected_controls);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const ChatFormat format = in.ConsumeBool() ? ChatFormat::kLlama3 : ChatFormat::kChatML;
  const bool gen = in.ConsumeBool();
  std::vector<ChatMessage> messages(in.ConsumeIntegralInRange<size_t>(0, 8));
  for (ChatMessage& m : messages) {
    constexpr const char* kRoles[] = {"system", "user", "assistant"};
    const size_t role = in.ConsumeIntegralInRange<size_t>(0, 3);
    m.role = role < 3 ? kRoles[role] : in.ConsumeRandomLengthString(32);
    m.content = in.ConsumeRandomLengthString(512);
  }

  absl::StatusOr<std::string> text = tpserve::RenderChat(format, messages, gen);
  absl::StatusOr<std::vector<tpserve::ChatSegment>> segments = tpserve::RenderChatSegments(format, messages, gen);
  TPSERVE_FUZZ_CHECK(text.ok() == Acceptable(messages) && segments.ok() == text.ok());
  if (!text.ok()) {
    TPSERVE_FUZZ_CHECK(text.status().code() == absl::StatusCode::kInvalidArgument &&
                       text.status() == segments.status());
    return 0;
  }
  size_t controls = 0;
  TPSERVE_FUZZ_CHECK(*text == Reference(format, messages, gen, controls));
  CheckSegments(format, *segments, *text, controls);
  return 0;
}
