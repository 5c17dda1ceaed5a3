// A grammar's token mask applied to a row of logits (the host sampler's side;
// the CUDA sampler's kernel does the same on the device, and the two agree bit
// for bit: tests/cuda_emu). The mask is packed as grammar/matcher.h writes it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>


namespace tpserve {

// Words of a mask over `vocab` tokens: bit t % 32 of word t / 32 is token t.
inline int64_t TokenMaskWords(int64_t vocab) { return (vocab + 31) / 32; }

// Sets row[t] = -inf for every token t whose bit is clear; ids past the mask
// (e.g. the padding of the LM head, beyond the tokenizer) are cleared too.
//   words: [TokenMaskWords(row.size())] or fewer; row: [V] logits, in place.
inline void ApplyTokenMask(std::span<const uint32_t> words, std::span<float> row) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const int64_t vocab = static_cast<int64_t>(row.size());
  for (int64_t first = 0; first < vocab; first += 32) {  // word by word: a mask is mostly all-0 or all-1 words
    const int64_t w = first >> 5, n = std::min<int64_t>(32, vocab - first);
    const uint32_t bits = w < static_cast<int64_t>(words.size()) ? words[static_cast<size_t>(w)] : 0u;
    float* p = row.data() + first;
    if (bits == 0) {
      std::fill(p, p + n, kMasked);
    } else if (bits != ~0u) {
      for (int64_t b = 0; b < n; ++b) {
        if (((bits >> b) & 1u) == 0) p[b] = kMasked;
      }
    }
  }
}

// ApplyTokenMask on a copy, in one pass: out[t] = row[t] where bit t is set,
// -inf elsewhere. Every bit outside words [lo, hi) is known to be clear, so
// the logits there are not read, only -inf written (a mask of a few words
// costs one fill of the row, not a copy and a second pass).
//   words: [TokenMaskWords(row.size())] or fewer; row: [V]; out: resized to [V]
inline void CopyMaskedRow(std::span<const uint32_t> words, int64_t lo, int64_t hi, std::span<const float> row,
                          std::vector<float>& out) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const auto vocab = static_cast<int64_t>(row.size());
  out.resize(row.size());
  hi = std::min({hi, TokenMaskWords(vocab), static_cast<int64_t>(words.size())});
  lo = std::clamp<int64_t>(lo, 0, std::max<int64_t>(hi, 0));
  float* o = out.data();
  std::fill(o, o + std::min(lo * 32, vocab), kMasked);
  for (int64_t w = lo; w < hi; ++w) {
    const int64_t first = w * 32, n = std::min<int64_t>(32, vocab - first);
    const uint32_t bits = words[static_cast<size_t>(w)];
    if (bits == 0) {
      std::fill(o + first, o + first + n, kMasked);
    } else if (bits == ~0u) {
      std::copy(row.data() + first, row.data() + first + n, o + first);
    } else {
      for (int64_t b = 0; b < n; ++b) {
        o[first + b] = ((bits >> b) & 1u) != 0 ? row[static_cast<size_t>(first + b)] : kMasked;
      }
    }
  }
  std::fill(o + std::min(std::max<int64_t>(hi, lo) * 32, vocab), o + vocab, kMasked);
}

// Bits of word w of a mask over `vocab` ids that are tokens (those past
// the vocabulary in its last word never count).
inline uint32_t TokenMaskBits(std::span<const uint32_t> words, int64_t w, int32_t vocab) {
  uint32_t bits = words[static_cast<size_t>(w)];
  if (w == TokenMaskWords(vocab) - 1 && vocab % 32 != 0) bits &= (1u << (vocab % 32)) - 1;
  return bits;
}

// The first allowed token at or after `from` (in [0, vocab)), wrapping around
// past the last of `vocab` ids; -1 when none is allowed. Every bit outside
// words [lo, hi) is known to be clear, so it reads those words only (at most
// twice: from `from` on, then from lo), word by word, not bit by bit.
//   words: [TokenMaskWords(vocab)]
inline int32_t NextAllowedToken(std::span<const uint32_t> words, int32_t from, int32_t vocab, int64_t lo,
                                int64_t hi) {
  hi = std::min({hi, TokenMaskWords(vocab), static_cast<int64_t>(words.size())});
  lo = std::max<int64_t>(lo, 0);
  const int64_t at = from / 32;
  const uint32_t from_on = ~0u << (from % 32);  // in word `at`: ids >= from
  for (int64_t w = std::max(at, lo); w < hi; ++w) {
    const uint32_t bits = TokenMaskBits(words, w, vocab) & (w == at ? from_on : ~0u);
    if (bits != 0) return static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
  }
  for (int64_t w = lo; w < hi && w <= at; ++w) {  // wrapped: ids before `from`
    const uint32_t bits = TokenMaskBits(words, w, vocab) & (w == at ? ~from_on : ~0u);
    if (bits != 0) return static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
  }
  return -1;
}
inline int32_t NextAllowedToken(std::span<const uint32_t> words, int32_t from, int32_t vocab) {
  return NextAllowedToken(words, from, vocab, 0, TokenMaskWords(vocab));
}

// Jump-forward: the one token the mask allows, or -1 when it allows none or
// more than one (ids at or past `vocab` do not count). Reads words [lo, hi)
// only (every bit outside is known to be clear) and stops at the second
// allowed word, so a wide mask costs a few words, a forced one its range.
//   words: [TokenMaskWords(vocab)]
inline int32_t SoleAllowedToken(std::span<const uint32_t> words, int32_t vocab, int64_t lo, int64_t hi) {
  int32_t found = -1;
  hi = std::min({hi, TokenMaskWords(vocab), static_cast<int64_t>(words.size())});
  for (int64_t w = std::max<int64_t>(lo, 0); w < hi; ++w) {
    const uint32_t bits = TokenMaskBits(words, w, vocab);
    if (bits == 0) continue;
    if (found >= 0 || (bits & (bits - 1)) != 0) return -1;
    found = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
  }
  return found;
}
inline int32_t SoleAllowedToken(std::span<const uint32_t> words, int32_t vocab) {
  return SoleAllowedToken(words, vocab, 0, TokenMaskWords(vocab));
}

}  // namespace tpserve
