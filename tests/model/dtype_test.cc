#include "model/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace tpserve {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(DTypeFromName(DTypeName(d)), d);
  }
  EXPECT_FALSE(DTypeFromName("F64").has_value());
  EXPECT_FALSE(DTypeFromName("bf16").has_value());
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
}

TEST(DType, Bf16KnownValues) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 ties up to the even neighbour 1 + 2^-6.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.5f), 0xc100);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(1e6f), 0x7c00);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(F16ToFloat(0xfc00)));
  EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(NAN))));
}

TEST(DType, EveryF16AndBf16PatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float h = F16ToFloat(bits);
    if (!std::isnan(h)) {
      EXPECT_EQ(FloatToF16(h), bits) << "f16 bits " << b;
    }
    const float g = Bf16ToFloat(bits);
    if (!std::isnan(g)) {
      EXPECT_EQ(FloatToBf16(g), bits) << "bf16 bits " << b;
    }
  }
}

TEST(DType, ConvertMatchesScalarFunctions) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(19);
  for (float& v : x) v = dist(rng);
  std::vector<uint16_t> bf(x.size()), h(x.size());
  std::vector<float> back(x.size());
  ConvertDType(x.data(), DType::kF32, bf.data(), DType::kBF16, x.size());
  ConvertDType(bf.data(), DType::kBF16, h.data(), DType::kF16, x.size());
  ConvertDType(h.data(), DType::kF16, back.data(), DType::kF32, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(bf[i], FloatToBf16(x[i]));
    EXPECT_EQ(h[i], FloatToF16(Bf16ToFloat(bf[i])));
    EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) * 1e-2f + 1e-3f);
  }
}

}  // namespace
}  // namespace tpserve
