// Text: a string that remembers, byte range by byte range, whether it came from
// the template's own source (a literal, trusted) or from the data the template was
// rendered with (messages, tools: untrusted). The chat renderer encodes trusted
// ranges with special tokens enabled and data ranges as plain text, so a user
// cannot forge chat structure by writing "<|im_end|>" in a message
// (see tokenizer/chat_template.h, RenderTemplateSegments).
//
// Operations that keep bytes in place (concatenation, slicing, strip, split,
// join) keep their origin; an operation that makes new bytes out of data
// (upper, replace, tojson, ...) marks its result as data.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tpserve::jinja {

class Text {
 public:
  // One run of bytes of one origin: bytes [previous run's end, end) of str().
  struct Run {
    size_t end = 0;
    bool trusted = false;  // true: from the template source (or a trusted variable)
  };

  Text() = default;
  Text(std::string_view s, bool trusted) { Append(s, trusted); }
  static Text Data(std::string_view s) { return Text(s, false); }
  static Text Trusted(std::string_view s) { return Text(s, true); }

  const std::string& str() const { return str_; }
  const std::vector<Run>& runs() const { return runs_; }
  size_t size() const { return str_.size(); }
  bool empty() const { return str_.empty(); }

  void Append(std::string_view s, bool trusted);
  void Append(const Text& other);
  // Bytes [begin, end) of this text, each keeping its origin. Requires begin <= end <= size().
  Text Slice(size_t begin, size_t end) const;
  // True when every byte is trusted (an empty text is trusted).
  bool AllTrusted() const;

 private:
  std::string str_;
  std::vector<Run> runs_;  // adjacent runs differ in origin; none is empty
};

}  // namespace tpserve::jinja
