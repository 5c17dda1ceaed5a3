// A grammar's token mask applied to a row of logits (the host sampler's side;
// the CUDA sampler's kernel does the same on the device, and the two agree bit
// for bit: tests/cuda_emu). The mask is packed as grammar/matcher.h writes it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>


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

// The first allowed token at or after `from`, wrapping around past the last
// of `vocab` ids (word by word, not bit by bit); -1 when none is allowed.
//   words: [TokenMaskWords(vocab)]
inline int32_t NextAllowedToken(std::span<const uint32_t> words, int32_t from, int32_t vocab) {
  const int64_t n = TokenMaskWords(vocab);
  for (int64_t k = 0; k <= n; ++k) {
    const int64_t w = (from / 32 + k) % n;
    uint32_t bits = words[static_cast<size_t>(w)];
    if (k == 0) bits &= ~0u << (from % 32);                             // ids before `from` in its word come last
    if (k == n) bits = words[static_cast<size_t>(w)] & ~(~0u << (from % 32));  // ... here
    if (w == n - 1 && vocab % 32 != 0) bits &= (1u << (vocab % 32)) - 1;  // past the vocabulary
    if (bits != 0) return static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
  }
  return -1;
}

// Jump-forward: the one token the mask allows, or -1 when it allows none or
// more than one (ids at or past `vocab` do not count). Stops at the second
// allowed word, so a wide mask costs a few words, a forced one the whole mask.
//   words: [TokenMaskWords(vocab)]
inline int32_t SoleAllowedToken(std::span<const uint32_t> words, int32_t vocab) {
  int32_t found = -1;
  const int64_t n = std::min<int64_t>(TokenMaskWords(vocab), static_cast<int64_t>(words.size()));
  for (int64_t w = 0; w < n; ++w) {
    uint32_t bits = words[static_cast<size_t>(w)];
    if (w == TokenMaskWords(vocab) - 1 && vocab % 32 != 0) bits &= (1u << (vocab % 32)) - 1;  // past the vocabulary
    if (bits == 0) continue;
    if (found >= 0 || (bits & (bits - 1)) != 0) return -1;
    found = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
  }
  return found;
}

}  // namespace tpserve
