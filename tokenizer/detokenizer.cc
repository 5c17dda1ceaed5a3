#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace tpserve {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Add(int32_t id) {
  const Tokenizer::Piece* p = tokenizer_.PieceOf(id);
  std::string out;
  if (p == nullptr) return out;
  if (p->kind == Tokenizer::Piece::Kind::kBytes) {
    pending_ += p->text;
    const size_t stable = utf8::StablePrefix(pending_);
    utf8::AppendLossy(std::string_view(pending_).substr(0, stable), out);
    pending_.erase(0, stable);
    return out;
  }
  if (skip_special_tokens_ && p->special) return out;  // Decode drops it before joining byte runs
  // An added token ends the run of byte tokens, as in Decode.
  utf8::AppendLossy(pending_, out);
  pending_.clear();
  out += p->text;
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out = utf8::Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace tpserve
