// Sets of Unicode code points as the UTF-8 byte sequences that encode them
// (internal to the grammar engine). Used by regex character classes and by
// GBNF's [...] and "." to match characters byte by byte.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tpserve::grammar::internal {

// A set of code points: sorted, disjoint, non-adjacent closed ranges.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Sorts and merges overlapping or adjacent ranges.
CodepointRanges Normalize(CodepointRanges ranges);
// Every Unicode scalar value (no surrogates) not in `ranges` (normalized).
CodepointRanges Complement(const CodepointRanges& ranges);

// One UTF-8 encoding pattern: byte k lies in [lo[k], hi[k]] (1 to 4 bytes).
struct ByteSequence {
  int length = 0;
  uint8_t lo[4] = {};
  uint8_t hi[4] = {};
};

// The byte sequences that together match exactly the UTF-8 encodings of the
// scalar values in `ranges` (surrogates never match). At most a few per range.
std::vector<ByteSequence> Utf8Sequences(const CodepointRanges& ranges);

// Appends the UTF-8 encoding of `cp` (<= kMaxCodepoint).
void AppendUtf8(uint32_t cp, std::string& out);

// Decodes one well-formed UTF-8 scalar value at the start of `s`; returns its
// length in bytes (0 when `s` does not start with one) and sets `cp`.
int DecodeUtf8(const char* s, size_t n, uint32_t& cp);

}  // namespace tpserve::grammar::internal
