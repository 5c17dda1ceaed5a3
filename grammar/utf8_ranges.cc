// Code point ranges to UTF-8 byte-range sequences: the split of Rust
// regex-syntax's utf8.rs, written from its description. A range is cut where
// the encoded length changes, then where the bytes below the first differing
// one do not span their whole continuation range, until every byte position
// of the range is one contiguous byte range.
#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace tpserve::grammar::internal {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

int EncodedLength(uint32_t cp) { return cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4; }

int Encode(uint32_t cp, uint8_t* out) {
  if (cp <= 0x7F) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp <= 0x7FF) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp <= 0xFFFF) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// [lo, hi] has no surrogates.
void Split(uint32_t lo, uint32_t hi, std::vector<ByteSequence>& out) {
  for (uint32_t limit : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= limit && hi > limit) {
      Split(lo, limit, out);
      Split(limit + 1, hi, out);
      return;
    }
  }
  const int n = EncodedLength(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Split(lo, lo | m, out);
        Split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Split(lo, (hi & ~m) - 1, out);
        Split(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteSequence seq;
  seq.length = Encode(lo, seq.lo);
  Encode(hi, seq.hi);
  out.push_back(seq);
}

}  // namespace

CodepointRanges Normalize(CodepointRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodepointRanges out;
  for (const auto& [lo, hi] : ranges) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodepointRanges Complement(const CodepointRanges& ranges) {
  CodepointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return out;
}

std::vector<ByteSequence> Utf8Sequences(const CodepointRanges& ranges) {
  std::vector<ByteSequence> out;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    if (lo < kSurrogateLo && hi >= kSurrogateLo) {
      Split(lo, kSurrogateLo - 1, out);
      if (hi > kSurrogateHi) Split(kSurrogateHi + 1, hi, out);
    } else if (lo >= kSurrogateLo && lo <= kSurrogateHi) {
      if (hi > kSurrogateHi) Split(kSurrogateHi + 1, hi, out);
    } else {
      Split(lo, hi, out);
    }
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  uint8_t bytes[4];
  const int n = Encode(cp, bytes);
  out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

int DecodeUtf8(const char* s, size_t n, uint32_t& cp) {
  if (n == 0) return 0;
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  int len = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (n < static_cast<size_t>(len)) return 0;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > kMaxCodepoint || (cp >= kSurrogateLo && cp <= kSurrogateHi)) return 0;
  return len;
}

}  // namespace tpserve::grammar::internal
