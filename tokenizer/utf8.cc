#include "tokenizer/utf8.h"

#include <cstdint>

namespace tpserve::utf8 {
namespace {

enum class Status { kOk, kInvalid, kTruncated };

struct Step {
  size_t len;     // bytes consumed: the sequence, or the maximal ill-formed subpart
  Status status;  // kTruncated: a valid prefix of a sequence that hit the end of `s`
};

// Examines the sequence starting at s[i] (Unicode Table 3-7, well-formed byte sequences).
Step Examine(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {1, Status::kOk};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return {1, Status::kInvalid};
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return {k, Status::kTruncated};
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {k, Status::kInvalid};
  }
  return {need, Status::kOk};
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

bool IsValid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step st = Examine(s, i);
    if (st.status != Status::kOk) return false;
    i += st.len;
  }
  return true;
}

void AppendLossy(std::string_view s, std::string& out) {
  size_t i = 0, run = 0;  // [run, i) is valid and not yet copied
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step st = Examine(s, i);
    if (st.status == Status::kOk) {
      i += st.len;
      continue;
    }
    out.append(s.substr(run, i - run));
    out.append(kReplacement);
    i += st.len;
    run = i;
  }
  out.append(s.substr(run));
}

std::string Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendLossy(s, out);
  return out;
}

size_t StablePrefix(std::string_view s) {
  // Only the last (at most 4) bytes can hold an incomplete sequence; start the
  // scan at a byte that is not a continuation byte so the scan is in sync.
  size_t i = s.size() > 4 ? s.size() - 4 : 0;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  while (i < s.size()) {
    const Step st = Examine(s, i);
    if (st.status == Status::kTruncated) return i;
    i += st.len;
  }
  return s.size();
}

char32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> len);
  for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

void AppendCodePoint(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace tpserve::utf8
