// Deterministic, fast pseudo-random numbers for generated weights.
//
// Each tensor gets its own stream seeded from (seed, tensor name), so a tensor's
// values do not depend on the order tensors are written in or on how the model is
// split into shards: --shards 1 and --shards 3 give the same weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "base/random.h"

namespace tpserve::make_model {

// SplitMix64 (Steele, Lea, Flood 2014) as a stream: a 64-bit state advanced by a
// constant, each value base/random.h's finaliser of it.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    const uint64_t z = ::tpserve::SplitMix64(state_);  // base/random.h: adds the constant, then mixes
    state_ += 0x9e3779b97f4a7c15ull;
    return z;
  }
  // Approximately standard normal: the sum of four 16-bit uniforms (Irwin-Hall),
  // centred and scaled to unit variance. Bounded by +-3.46; one Next() per value.
  float Normal() {
    const uint64_t r = Next();
    const uint32_t s = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                       static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    // Each 16-bit uniform has mean 32767.5 and variance (65536^2 - 1) / 12.
    constexpr float kMean = 4.0f * 32767.5f;
    constexpr float kInvStd = 1.0f / 37837.23f;  // 1 / sqrt(4 * (65536^2 - 1) / 12)
    return (static_cast<float>(s) - kMean) * kInvStd;
  }

 private:
  uint64_t state_;
};

// FNV-1a of the name mixed with the seed: the per-tensor stream seed.
inline uint64_t TensorSeed(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  SplitMix64 mix(h ^ (seed * 0x9e3779b97f4a7c15ull));
  return mix.Next();
}

}  // namespace tpserve::make_model
