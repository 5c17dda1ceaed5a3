// The RoPE table against angles computed here in long double, and the llama3
// frequency bands against transformers' _compute_llama3_parameters written out
// band by band.
#include "worker/rope.h"

#include <cmath>
#include <numbers>
#include <random>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// transformers' default inverse frequencies, then its llama3 rule, in long double.
long double ExpectedInvFreq(int64_t i, int64_t hd, long double theta, const RopeScaling& s) {
  long double f = 1.0L / std::pow(theta, static_cast<long double>(2 * i) / hd);
  if (s.type != RopeScaling::Type::kLlama3) return f;
  const long double old_ctx = s.original_max_position_embeddings;
  const long double low_wavelen = old_ctx / s.low_freq_factor;
  const long double high_wavelen = old_ctx / s.high_freq_factor;
  const long double wavelen = 2.0L * std::numbers::pi_v<long double> / f;
  const long double scaled = wavelen > low_wavelen ? f / s.factor : f;
  const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
  if (!medium) return scaled;
  const long double smooth = (old_ctx / wavelen - s.low_freq_factor) /
                             (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * scaled / s.factor + smooth * scaled;
}

RopeScaling Llama31Scaling() {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  return s;
}

TEST(RopeTest, TableRowsAreCosThenSinOfPositionTimesFrequency) {
  for (int64_t hd : {2, 6, 64, 128}) {
    for (bool llama3 : {false, true}) {
      const RopeScaling scaling = llama3 ? Llama31Scaling() : RopeScaling{};
      const double theta = llama3 ? 500000.0 : 10000.0;
      const int64_t max_pos = 37;
      const std::vector<float> table = BuildRopeTable(max_pos, hd, theta, scaling);
      ASSERT_EQ(table.size(), static_cast<size_t>(max_pos * hd));
      for (int64_t p = 0; p < max_pos; ++p) {
        for (int64_t i = 0; i < hd / 2; ++i) {
          const long double angle = p * ExpectedInvFreq(i, hd, theta, scaling);
          SCOPED_TRACE(testing::Message() << "hd " << hd << " llama3 " << llama3 << " p " << p
                                          << " i " << i);
          EXPECT_NEAR(table[p * hd + i], static_cast<double>(std::cos(angle)), 1e-6);
          EXPECT_NEAR(table[p * hd + hd / 2 + i], static_cast<double>(std::sin(angle)), 1e-6);
        }
      }
    }
  }
}

TEST(RopeTest, Llama3BandsKeepHighScaleLowAndInterpolateBetween) {
  const RopeScaling s = Llama31Scaling();
  const int64_t hd = 128;
  const std::vector<double> scaled = RopeInverseFrequencies(hd, 500000.0, s);
  const std::vector<double> plain = RopeInverseFrequencies(hd, 500000.0, RopeScaling{});
  int high = 0, low = 0, medium = 0;
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    EXPECT_NEAR(scaled[i], static_cast<double>(ExpectedInvFreq(i, hd, 500000.0L, s)),
                1e-15 * plain[i]);
    if (wavelen < 8192.0 / 4.0) {
      ++high;
      EXPECT_EQ(scaled[i], plain[i]) << i;
    } else if (wavelen > 8192.0) {
      ++low;
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8.0) << i;
    } else {
      ++medium;
      EXPECT_LT(scaled[i], plain[i]) << i;
      EXPECT_GT(scaled[i], plain[i] / 8.0) << i;
    }
  }
  // Llama 3.1 (theta 5e5, hd 128) has frequencies in all three bands.
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST(RopeTest, RandomScalingParametersMatchTheReferenceRule) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    RopeScaling s;
    s.type = RopeScaling::Type::kLlama3;
    s.factor = 1.5 + 30 * u(rng);
    s.low_freq_factor = 0.5 + u(rng);
    s.high_freq_factor = s.low_freq_factor + 0.5 + 6 * u(rng);
    s.original_max_position_embeddings = 256 + static_cast<int64_t>(u(rng) * 16384);
    const int64_t hd = 2 * (1 + static_cast<int64_t>(u(rng) * 80));
    const double theta = 1000.0 + u(rng) * 1e6;
    const std::vector<double> got = RopeInverseFrequencies(hd, theta, s);
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double want = static_cast<double>(ExpectedInvFreq(i, hd, theta, s));
      EXPECT_NEAR(got[i], want, 1e-13 * want) << "trial " << trial << " i " << i;
    }
  }
}

}  // namespace
}  // namespace tpserve
