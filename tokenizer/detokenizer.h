// Incremental detokenization for streaming: feed ids one at a time, get the
// text that is final so far. A piece never ends inside a UTF-8 sequence (an
// emoji split over several byte tokens is held back until complete), and the
// pieces of Add(...)... + Finish() concatenate to exactly Tokenizer::Decode of
// all the ids (ill-formed bytes become U+FFFD in both, the same way).
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace tpserve {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Text completed by `id` (possibly empty). An id that Decode would reject
  // (outside the vocabulary) yields "" and is otherwise ignored.
  std::string Add(int32_t id);

  // Whatever is left (an incomplete UTF-8 tail decodes to U+FFFD). The
  // detokenizer is empty afterwards and can be reused.
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of byte tokens not yet emitted: at most an incomplete UTF-8 sequence
};

}  // namespace tpserve
