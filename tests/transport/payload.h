// Seeded message contents and checksums for the transport tests: both ends
// derive message i from (seed, i), so a reader in another process can check
// every byte without the writer sending the expectation along.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/random.h"

namespace tpserve::transport_test {

// Message i of a stream: `size` bytes, never all zeros.
inline std::string Payload(uint64_t seed, uint64_t i, size_t size) {
  std::string out(size, '\0');
  uint64_t state = SplitMix64(seed ^ SplitMix64(i + 1));
  for (size_t b = 0; b < size; ++b) {
    if (b % 8 == 0) state = SplitMix64(state);
    out[b] = static_cast<char>(state >> (8 * (b % 8)));
  }
  return out;
}

// FNV-1a over the bytes, then mixed: a reply the hub can compare.
inline uint64_t Checksum(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return SplitMix64(h ^ bytes.size());
}

inline std::string ChecksumReply(std::string_view bytes) { return std::to_string(Checksum(bytes)); }

// The sizes of a stream of n messages through a ring of `ring` bytes: the edge
// cases first (empty, 1 byte, one under, at and over the ring, ten rings, odd
// sizes), then random sizes up to three rings.
inline std::vector<size_t> MessageSizes(uint64_t seed, size_t ring, int n) {
  std::vector<size_t> sizes = {0, 1, ring - 1, ring, ring + 1, 10 * ring, 3, 7, 19, 733, 16, 8, 0, 0};
  uint64_t state = seed;
  while (static_cast<int>(sizes.size()) < n) {
    state = SplitMix64(state);
    sizes.push_back(state % (3 * ring));
  }
  sizes.resize(static_cast<size_t>(n));
  return sizes;
}

}  // namespace tpserve::transport_test
