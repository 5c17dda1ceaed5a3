// libFuzzer target: Tokenizer::Encode / Decode and the IncrementalDetokenizer on
// arbitrary bytes, with the toy byte-level BPE of tests/tokenizer/toy_tokenizer.h
// (no network). Built only with -DTPSERVE_FUZZ=ON by clang (scripts/fuzz.sh).
//
// Input: one flag byte (bit 0 add_special_tokens, bit 1 special tokens in the text
// match, bit 2 skip_special_tokens when decoding), then the text. Invariants:
//  * every encoded id is inside the vocabulary and Decode accepts it;
//  * the round trip: Decode(Encode(text)) is the text with ill-formed UTF-8 replaced
//    by U+FFFD (utf8::Lossy), once the post-processor's BOS is set aside, unless the
//    text holds an lstrip/rstrip added token (<L>, <R>), which eat whitespace by design;
//  * the detokenizer, fed the encoded ids and then the text's bytes read as ids (byte
//    tokens, merged and added tokens, holes and ids out of range), gives valid UTF-8
//    pieces whose concatenation is Decode of the ids Decode accepts.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tests/testing/fuzz_check.h"
#include "tests/tokenizer/toy_tokenizer.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using tpserve::Tokenizer;

const Tokenizer& Toy() {
  static const Tokenizer* const toy = [] {
    auto t = Tokenizer::FromJsonText(tpserve::testing::ToyTokenizerJson().dump(), "toy");
    TPSERVE_FUZZ_CHECK(t.ok());
    return t->release();
  }();
  return *toy;
}

void CheckRoundTrip(const Tokenizer& t, std::string_view text, const std::vector<int32_t>& ids,
                    bool add_special_tokens) {
  std::span<const int32_t> body(ids);
  if (add_special_tokens) {  // the toy post-processor puts <|s|> in front
    TPSERVE_FUZZ_CHECK(!body.empty() && body.front() == tpserve::testing::kBos);
    body = body.subspan(1);
  }
  absl::StatusOr<std::string> decoded = t.Decode(body, /*skip_special_tokens=*/false);
  TPSERVE_FUZZ_CHECK(decoded.ok());
  if (text.find("<L>") == std::string_view::npos && text.find("<R>") == std::string_view::npos) {
    TPSERVE_FUZZ_CHECK(*decoded == tpserve::utf8::Lossy(text));
  }
}

// Streams `ids` through the detokenizer; the pieces must be valid UTF-8 and add up to
// Decode of the ids Decode accepts (the detokenizer ignores the others).
void CheckStreaming(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  tpserve::IncrementalDetokenizer detok(t, skip_special);
  std::vector<int32_t> accepted;
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detok.Add(id);
    TPSERVE_FUZZ_CHECK(tpserve::utf8::IsValid(piece));
    streamed += piece;
    const int32_t one[] = {id};
    if (t.Decode(one, skip_special).ok()) accepted.push_back(id);
  }
  const std::string tail = detok.Finish();
  TPSERVE_FUZZ_CHECK(tpserve::utf8::IsValid(tail));
  streamed += tail;
  absl::StatusOr<std::string> whole = t.Decode(accepted, skip_special);
  TPSERVE_FUZZ_CHECK(whole.ok() && *whole == streamed);
  TPSERVE_FUZZ_CHECK(detok.Finish().empty());  // empty after Finish
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& t = Toy();
  const bool add_special_tokens = (data[0] & 1) != 0;
  const auto specials =
      (data[0] & 2) != 0 ? tpserve::SpecialTokensInText::kMatch : tpserve::SpecialTokensInText::kAsText;
  const bool skip_special = (data[0] & 4) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  std::vector<int32_t> ids = t.Encode(text, add_special_tokens, specials);
  for (int32_t id : ids) TPSERVE_FUZZ_CHECK(id >= 0 && id < t.vocab_size());
  CheckRoundTrip(t, text, ids, add_special_tokens);

  // Then the text's bytes read as ids: a byte below 0xF0 is that byte's token; the
  // rest pick from merged tokens, added tokens, a hole in the vocabulary (264), ids
  // out of range, and the bytes 0xF0 / 0xFF themselves.
  namespace toy = tpserve::testing;
  constexpr int32_t kOther[16] = {0xF0,      5000,      0xFF,         toy::kAb,        toy::kBc,
                                  toy::kAbc, toy::kXyz, toy::kSpaceT, toy::kEmojiHead, toy::kEmojiTail,
                                  toy::kBos, toy::kEnd, toy::kL,      toy::kThink,     264,
                                  -7};
  for (unsigned char b : text) ids.push_back(b < 0xF0 ? b : kOther[b - 0xF0]);
  CheckStreaming(t, ids, skip_special);
  return 0;
}
