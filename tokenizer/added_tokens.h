// Added tokens ("added_tokens" in tokenizer.json: <|begin_of_text|>, <think>, ...)
// and the matcher that splits them out of text before normalization and
// pre-tokenization, as Hugging Face tokenizers does: leftmost-longest match;
// single_word tokens only match between non-word characters; lstrip / rstrip
// swallow the whitespace on their left / right.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpserve {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by Decode(skip_special_tokens = true)
  bool lstrip = false;       // absorbs whitespace on its left
  bool rstrip = false;       // absorbs whitespace on its right
  bool single_word = false;  // matches only when not inside a word
  bool normalized = false;   // matched in normalized text (else in the raw input)
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<const AddedToken*>& tokens);

  bool empty() const { return count_ == 0; }

  // A piece of the split text: [begin, end) of the input, and the id of the
  // added token that covers it (including absorbed whitespace), or -1 for text.
  struct Segment {
    size_t begin;
    size_t end;
    int32_t id;
  };
  // Appends the segments of `text` (valid UTF-8) in order. Empty text segments are left out.
  // With match_special = false, tokens marked special are not matched: their
  // content stays in the text segments (Hugging Face's split_special_tokens).
  void Split(std::string_view text, std::vector<Segment>& out, bool match_special = true) const;

 private:
  std::array<std::vector<const AddedToken*>, 256> by_first_byte_;  // each sorted longest first
  size_t count_ = 0;
};

}  // namespace tpserve
