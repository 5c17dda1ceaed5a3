#include "tokenizer/added_tokens.h"

#include <algorithm>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace tpserve {
namespace {

// Unicode White_Space (what Rust's \s matches).
bool IsSpace(char32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return true;
  if (cp < 0x80) return false;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// A word character (Rust's \w: letters, marks, decimal digits, connector punctuation).
bool IsWord(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Start of the code point that ends just before `pos`.
size_t PrevStart(std::string_view s, size_t pos) {
  size_t i = pos - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens) {
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(t->content[0])].push_back(t);
    ++count_;
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  }
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>& out, bool match_special) const {
  size_t done = 0;  // text before `done` has been emitted
  size_t i = 0;
  while (i < text.size()) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[i])];
    const AddedToken* match = nullptr;
    for (const AddedToken* t : candidates) {
      if (t->special && !match_special) continue;
      if (text.compare(i, t->content.size(), t->content) == 0) {
        match = t;  // longest first
        break;
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + match->content.size();
    if (match->single_word) {
      size_t k = 0;
      const bool word_before = begin > 0 && IsWord(utf8::NextCodePoint(text, k = PrevStart(text, begin)));
      k = end;
      const bool word_after = end < text.size() && IsWord(utf8::NextCodePoint(text, k));
      if (word_before || word_after) {
        i = end;  // like HF: this match is dropped and the search resumes after it
        continue;
      }
    }
    if (match->lstrip) {
      while (begin > done) {
        const size_t p = PrevStart(text, begin);
        size_t k = p;
        if (!IsSpace(utf8::NextCodePoint(text, k))) break;
        begin = p;
      }
    }
    if (match->rstrip) {
      while (end < text.size()) {
        size_t k = end;
        if (!IsSpace(utf8::NextCodePoint(text, k))) break;
        end = k;
      }
    }
    if (begin > done) out.push_back({done, begin, -1});
    out.push_back({begin, end, match->id});
    done = i = end;
  }
  if (text.size() > done) out.push_back({done, text.size(), -1});
}

}  // namespace tpserve
