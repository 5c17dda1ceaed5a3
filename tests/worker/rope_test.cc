// The RoPE table against values computed outside this code base: inverse
// frequencies and cos/sin entries from tests/worker/rope_reference.py (exact
// decimal arithmetic following transformers' default and llama3 rope
// parameters), plus identities any correct table satisfies: row 0, the unit
// circle, angle addition, and the shape of Llama 3.1's frequency bands.
#include "worker/rope.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

struct Freq {
  int64_t i;
  double inv_freq;
};
struct Entry {
  int64_t position, i;
  double cos, sin;
};
struct Reference {
  const char* name;
  int64_t head_dim;
  double theta;
  bool llama3;
  std::vector<Freq> freqs;
  std::vector<Entry> entries;
};

RopeScaling Llama31Scaling() {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  return s;
}

// Printed by `/usr/bin/python3 tests/worker/rope_reference.py`. Llama 3.1's
// i 0 and 20 are in the kept high-frequency band, 30 and 33 in the smoothed
// middle, 40 and 63 in the low band divided by 8.
const Reference kReferences[] = {
    {"plain", 64, 10000.0, false,
     {
         {0, 1.00000000000000000e+0},
         {1, 7.49894209332455827e-1},
         {13, 2.37137370566165526e-2},
         {31, 1.33352143216332403e-4},
     },
     {
         {1, 0, 5.40302305868139717e-1, 8.41470984807896507e-1},
         {1, 1, 7.31760975798724757e-1, 6.81561350355269309e-1},
         {1, 13, 9.99718842513314762e-1, 2.37115145833866278e-2},
         {1, 31, 9.99999991108602963e-1, 1.33352142821103452e-4},
         {7, 0, 7.53902254343304638e-1, 6.56986598718789090e-1},
         {7, 1, 5.11449266114241353e-1, -8.59313474927051247e-1},
         {7, 13, 9.86254244442555750e-1, 1.65234879244799552e-1},
         {7, 31, 9.99999564321576176e-1, 9.33464866950802551e-4},
         {100, 0, 8.62318872287683934e-1, -5.06365641109758794e-1},
         {100, 1, 9.17597399260098932e-1, -3.97511022326554604e-1},
         {100, 13, -7.17758235036288984e-1, 6.96292406994066926e-1},
         {100, 31, 9.99911087347105935e-1, 1.33348190961964193e-2},
         {4095, 0, -6.59759965580648963e-2, -9.97821210376974402e-1},
         {4095, 1, -8.99100886019188143e-2, -9.95949886273197537e-1},
         {4095, 13, -9.60606755158256864e-1, 2.77911248322777948e-1},
         {4095, 31, 8.54568444914217161e-1, 5.19338784375764285e-1},
     }},
    {"llama3.1", 128, 500000.0, true,
     {
         {0, 1.00000000000000000e+0},
         {20, 1.65604400809944455e-2},
         {30, 1.37189356776113816e-3},
         {33, 3.12693750384065132e-4},
         {40, 3.42810219595259148e-5},
         {63, 3.06892598891451109e-7},
     },
     {
         {1, 0, 5.40302305868139717e-1, 8.41470984807896507e-1},
         {1, 20, 9.99862879045969159e-1, 1.65596831462938168e-2},
         {1, 30, 9.99999058954166962e-1, 1.37189313742286939e-3},
         {1, 33, 9.99999951111309634e-1, 3.12693745288335802e-4},
         {1, 40, 9.99999999412405767e-1, 3.42810219528114712e-5},
         {1, 63, 9.99999999999952908e-1, 3.06892598891446292e-7},
         {5, 0, 2.83662185463226264e-1, -9.58924274663138469e-1},
         {5, 20, 9.96573856003916951e-1, 8.27076147007287503e-2},
         {5, 30, 9.99976473942730669e-1, 6.85941404664358500e-3},
         {5, 33, 9.99998777782979854e-1, 1.56346811495423407e-3},
         {5, 40, 9.99999985310144204e-1, 1.71405108958324125e-4},
         {5, 63, 9.99999999998822712e-1, 1.53446299445665338e-6},
         {1000, 0, 5.62379076290702991e-1, 8.26879540532002560e-1},
         {1000, 20, -6.58120342313029609e-1, -7.52912753932207426e-1},
         {1000, 30, 1.97593842219248866e-1, 9.80283975956474861e-1},
         {1000, 33, 9.51508363857713428e-1, 3.07622875464126091e-1},
         {1000, 40, 9.99412463308948278e-1, 3.42743079104467537e-2},
         {1000, 63, 9.99999952908466742e-1, 3.06892594074103418e-4},
         {8191, 0, -6.46390469764257436e-1, -7.63006789352455627e-1},
         {8191, 20, -8.48273108986882470e-1, -5.29558998195412231e-1},
         {8191, 30, 2.39262216116129542e-1, -9.70954989656677402e-1},
         {8191, 33, -8.36288256952923202e-1, 5.48290024788561603e-1},
         {8191, 40, 9.60835196094555532e-1, 2.77120417771655752e-1},
         {8191, 63, 9.99996840513838585e-1, 2.51375463012554125e-3},
     }},
};

TEST(RopeTest, InverseFrequenciesMatchTheOfflineReference) {
  for (const Reference& r : kReferences) {
    const std::vector<double> got =
        RopeInverseFrequencies(r.head_dim, r.theta, r.llama3 ? Llama31Scaling() : RopeScaling{});
    ASSERT_EQ(got.size(), static_cast<size_t>(r.head_dim / 2)) << r.name;
    for (const Freq& f : r.freqs) {
      EXPECT_NEAR(got[static_cast<size_t>(f.i)], f.inv_freq, 1e-14 * f.inv_freq) << r.name << " i " << f.i;
    }
  }
}

TEST(RopeTest, TableMatchesTheOfflineReference) {
  for (const Reference& r : kReferences) {
    int64_t max_pos = 0;
    for (const Entry& e : r.entries) max_pos = std::max(max_pos, e.position + 1);
    const std::vector<float> table =
        BuildRopeTable(max_pos, r.head_dim, r.theta, r.llama3 ? Llama31Scaling() : RopeScaling{});
    ASSERT_EQ(table.size(), static_cast<size_t>(max_pos * r.head_dim)) << r.name;
    for (const Entry& e : r.entries) {
      const float* row = table.data() + e.position * r.head_dim;
      // float32 rounding of a value in [-1, 1] is below 6e-8.
      EXPECT_NEAR(row[e.i], e.cos, 1e-7) << r.name << " position " << e.position << " i " << e.i;
      EXPECT_NEAR(row[r.head_dim / 2 + e.i], e.sin, 1e-7) << r.name << " position " << e.position << " i " << e.i;
    }
  }
}

// Row 0 is cos 1 | sin 0; dimension 0 turns by one radian per position (f_0 = 1,
// a wavelength of 2π, kept by every llama3 scaling); every (cos, sin) pair is on
// the unit circle.
TEST(RopeTest, RowZeroFirstDimensionAndUnitCircle) {
  for (int64_t hd : {2, 6, 64, 128}) {
    for (bool llama3 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "hd " << hd << " llama3 " << llama3);
      const int64_t max_pos = 300;
      const std::vector<float> table =
          BuildRopeTable(max_pos, hd, llama3 ? 500000.0 : 10000.0, llama3 ? Llama31Scaling() : RopeScaling{});
      for (int64_t i = 0; i < hd / 2; ++i) {
        EXPECT_EQ(table[i], 1.0f);
        EXPECT_EQ(table[hd / 2 + i], 0.0f);
      }
      for (int64_t p = 0; p < max_pos; ++p) {
        const float* row = table.data() + p * hd;
        EXPECT_NEAR(row[0], std::cos(static_cast<double>(p)), 1e-7) << p;
        EXPECT_NEAR(row[hd / 2], std::sin(static_cast<double>(p)), 1e-7) << p;
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double c = row[i], s = row[hd / 2 + i];
          ASSERT_NEAR(c * c + s * s, 1.0, 3e-7) << "position " << p << " i " << i;
        }
      }
    }
  }
}

// The angle of row p is p times a frequency: rows p and q give row p + q by
// angle addition, whatever the scaling parameters.
TEST(RopeTest, RowsComposeByAngleAddition) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    RopeScaling s;
    if (trial % 2 == 1) {
      s.type = RopeScaling::Type::kLlama3;
      s.factor = 1.5 + 30 * u(rng);
      s.low_freq_factor = 0.5 + u(rng);
      s.high_freq_factor = s.low_freq_factor + 0.5 + 6 * u(rng);
      s.original_max_position_embeddings = 256 + static_cast<int64_t>(u(rng) * 16384);
    }
    const int64_t hd = 2 * (1 + static_cast<int64_t>(u(rng) * 80));
    const double theta = 1000.0 + u(rng) * 1e6;
    const int64_t max_pos = 1024;
    const std::vector<float> table = BuildRopeTable(max_pos, hd, theta, s);
    for (int k = 0; k < 50; ++k) {
      const int64_t p = static_cast<int64_t>(rng() % 512), q = static_cast<int64_t>(rng() % 512);
      const float *a = table.data() + p * hd, *b = table.data() + q * hd, *sum = table.data() + (p + q) * hd;
      for (int64_t i = 0; i < hd / 2; ++i) {
        const int64_t j = hd / 2 + i;
        const double want_cos = static_cast<double>(a[i]) * b[i] - static_cast<double>(a[j]) * b[j];
        const double want_sin = static_cast<double>(a[j]) * b[i] + static_cast<double>(a[i]) * b[j];
        ASSERT_NEAR(sum[i], want_cos, 5e-7) << "trial " << trial << " p " << p << " q " << q << " i " << i;
        ASSERT_NEAR(sum[j], want_sin, 5e-7) << "trial " << trial << " p " << p << " q " << q << " i " << i;
      }
    }
  }
}

// What the llama3 rule must do to the plain frequencies f (wavelength 2π / f),
// for any parameters: keep f where the wavelength is under
// original_max / high_freq_factor, divide by `factor` where it is over
// original_max / low_freq_factor, and in between scale by a ratio in
// (1 / factor, 1) that shrinks as the wavelength grows, so the three bands
// join without jumps.
void ExpectLlama3Bands(const RopeScaling& s, int64_t hd, double theta, int* high, int* medium, int* low) {
  const std::vector<double> scaled = RopeInverseFrequencies(hd, theta, s);
  const std::vector<double> plain = RopeInverseFrequencies(hd, theta, RopeScaling{});
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  double last_ratio = 1.0;
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    const double ratio = scaled[i] / plain[i];
    if (wavelen < old_ctx / s.high_freq_factor) {
      ++*high;
      EXPECT_EQ(scaled[i], plain[i]) << i;
    } else if (wavelen > old_ctx / s.low_freq_factor) {
      ++*low;
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / s.factor) << i;
    } else {
      ++*medium;
      EXPECT_LE(ratio, 1.0 + 1e-15) << i;
      EXPECT_GE(ratio, 1.0 / s.factor - 1e-15) << i;
    }
    EXPECT_LE(ratio, last_ratio + 1e-15) << "the scaling ratio grew at i " << i;
    last_ratio = ratio;
  }
}

TEST(RopeTest, Llama31HasAllThreeBands) {
  int high = 0, medium = 0, low = 0;
  ExpectLlama3Bands(Llama31Scaling(), 128, 500000.0, &high, &medium, &low);
  EXPECT_GT(high, 0);
  EXPECT_GT(medium, 0);
  EXPECT_GT(low, 0);
}

TEST(RopeTest, RandomScalingParametersKeepTheBandShape) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    RopeScaling s;
    s.type = RopeScaling::Type::kLlama3;
    s.factor = 1.5 + 30 * u(rng);
    s.low_freq_factor = 0.5 + u(rng);
    s.high_freq_factor = s.low_freq_factor + 0.5 + 6 * u(rng);
    s.original_max_position_embeddings = 256 + static_cast<int64_t>(u(rng) * 16384);
    const int64_t hd = 2 * (1 + static_cast<int64_t>(u(rng) * 80));
    int high = 0, medium = 0, low = 0;
    ExpectLlama3Bands(s, hd, 1000.0 + u(rng) * 1e6, &high, &medium, &low);
  }
}

}  // namespace
}  // namespace tpserve
