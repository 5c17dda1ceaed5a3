// Small deterministic mixing used where a seed becomes a stream (sampling
// seeds, prefix-cache block hashes, test seeds).
#pragma once

#include <cstdint>

namespace tpserve {

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijection on 64-bit words
// that spreads every input bit over the output.
constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace tpserve
