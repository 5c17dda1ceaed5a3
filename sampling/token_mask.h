// A grammar's token mask applied to a row of logits (the host sampler's side;
// the CUDA sampler's kernel does the same on the device, and the two agree bit
// for bit: tests/cuda_emu). The mask is packed as grammar/matcher.h writes it.
#pragma once

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
  const int64_t vocab = static_cast<int64_t>(row.size());
  for (int64_t t = 0; t < vocab; ++t) {
    const int64_t w = t >> 5;
    const bool allowed = w < static_cast<int64_t>(words.size()) && ((words[static_cast<size_t>(w)] >> (t & 31)) & 1u);
    if (!allowed) row[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace tpserve
