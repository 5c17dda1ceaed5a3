// Launch geometries against the hardware's grid limits, on the CPU: x up to
// 2^31 - 1, y and z up to 65,535 (sm_80, sm_90). A step may hold more tokens
// than 65,535 (--max-num-batched-tokens), so a per-token dimension must be x.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/qk_norm_rope.cuh"

namespace tpserve::cuda {
namespace {

constexpr int64_t kMaxGridX = 0x7fffffff;
constexpr int64_t kMaxGridY = 65535;

TEST(LaunchGeometry, QkNormRopePutsTokensOnXPastTheYLimit) {
  for (int64_t T : {int64_t{1}, int64_t{65535}, int64_t{65536}, int64_t{1} << 20, kMaxGridX}) {
    for (auto [hq, hkv] : {std::pair{1, 1}, std::pair{32, 8}, std::pair{64, 64}}) {
      QkNormRopeGrid g;
      ASSERT_TRUE(QkNormRopeGridFor(T, hq, hkv, &g)) << "T=" << T;
      EXPECT_EQ(g.tokens, static_cast<unsigned>(T)) << "one block per token on x";
      EXPECT_EQ(g.heads, static_cast<unsigned>(hq + hkv));
      EXPECT_LE(int64_t{g.tokens}, kMaxGridX);
      EXPECT_LE(int64_t{g.heads}, kMaxGridY);
    }
  }
}

TEST(LaunchGeometry, QkNormRopeRefusesWhatNoGridHolds) {
  QkNormRopeGrid g;
  EXPECT_FALSE(QkNormRopeGridFor(0, 4, 2, &g));
  EXPECT_FALSE(QkNormRopeGridFor(kMaxGridX + 1, 4, 2, &g));
  EXPECT_FALSE(QkNormRopeGridFor(16, 65535, 1, &g)) << "65,536 heads do not fit grid.y";
  EXPECT_TRUE(QkNormRopeGridFor(16, 65534, 1, &g));
}

}  // namespace
}  // namespace tpserve::cuda
