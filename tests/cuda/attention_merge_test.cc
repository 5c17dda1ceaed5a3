// The softmax-merge math of cuda/attention_merge.h (the functions the split
// decode attention kernels call) on the CPU: partials computed on the host
// from random scores and values, cut at random places, merged in random order,
// equal the one-pass softmax · V (in double): within 1e-6 when the partials
// and the merge are in double (the math is exact), within 2e-5 in float (what
// the kernels do: float rounding of the partials). Runs without a GPU.
// Replay a failure with TPSERVE_TEST_SEED=<the printed seed>.
#include "cuda/attention_merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace tpserve::cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename F>
constexpr double kTol = 1e-6;
template <>
constexpr double kTol<float> = 2e-5;

// A partial as the kernels store it: stats and a normalised [hd] row.
template <typename F>
struct Partial {
  F max = -std::numeric_limits<F>::infinity();
  F sum = 0;
  std::vector<F> out;
};

// The partial over keys [begin, end) in F (two passes: the max first, then
// the exponentials). An empty one's row is NaN, to prove it is never read.
template <typename F>
Partial<F> ComputePartial(const std::vector<float>& s, const std::vector<float>& v, int hd, int begin, int end) {
  Partial<F> p;
  p.out.assign(static_cast<size_t>(hd), F(0));
  for (int j = begin; j < end; ++j) p.max = std::max(p.max, F(s[j]));
  if (p.max == -std::numeric_limits<F>::infinity()) {
    p.out.assign(static_cast<size_t>(hd), std::numeric_limits<F>::quiet_NaN());
    return p;
  }
  for (int j = begin; j < end; ++j) {
    const F e = std::exp(F(s[j]) - p.max);
    p.sum += e;
    for (int d = 0; d < hd; ++d) p.out[d] += e * F(v[static_cast<size_t>(j) * hd + d]);
  }
  for (F& o : p.out) o /= p.sum;
  return p;
}

// softmax(s) · V over all keys in one pass, in double.
std::vector<double> Reference(const std::vector<float>& s, const std::vector<float>& v, int hd) {
  double m = -INFINITY;
  for (float x : s) m = std::max(m, double{x});
  std::vector<double> out(static_cast<size_t>(hd), 0.0);
  double den = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    const double e = std::exp(double{s[j]} - m);
    den += e;
    for (int d = 0; d < hd; ++d) out[d] += e * v[j * hd + d];
  }
  for (double& o : out) o /= den;
  return out;
}

// Merges partials with the header's functions, as the combine kernel does:
// stats over all, then each output element.
template <typename F>
Partial<F> Merge(const std::vector<Partial<F>>& parts, int hd) {
  std::vector<F> max, sum, out;
  for (const Partial<F>& p : parts) {
    max.push_back(p.max);
    sum.push_back(p.sum);
    out.insert(out.end(), p.out.begin(), p.out.end());
  }
  const int n = static_cast<int>(parts.size());
  const SoftmaxStats<F> stats = MergeStats(max.data(), sum.data(), n);
  Partial<F> merged{stats.max, stats.sum, std::vector<F>(static_cast<size_t>(hd))};
  for (int d = 0; d < hd; ++d) merged.out[d] = CombinePartials(max.data(), sum.data(), out.data() + d, hd, n);
  return merged;
}

// Cuts [0, n) into pieces: fixed `size`, or random sizes when size == 0;
// empty pieces sprinkled in between.
std::vector<std::pair<int, int>> Cut(int n, int size, std::mt19937& rng) {
  std::vector<std::pair<int, int>> pieces;
  for (int begin = 0; begin < n;) {
    if (rng() % 4 == 0) pieces.push_back({begin, begin});
    const int len = size > 0 ? size : 1 + static_cast<int>(rng() % static_cast<uint32_t>(std::max(1, n / 3)));
    const int end = std::min(n, begin + len);
    pieces.push_back({begin, end});
    begin = end;
  }
  return pieces;
}

template <typename F>
void ExpectNear(const Partial<F>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.out.size(), want.size()) << what;
  double worst = 0;
  for (size_t d = 0; d < want.size(); ++d) {
    ASSERT_FALSE(std::isnan(got.out[d])) << what << " d=" << d;
    worst = std::max(worst, std::abs(got.out[d] - want[d]) / std::max(1.0, std::abs(want[d])));
  }
  EXPECT_LE(worst, kTol<F>) << what << (sizeof(F) == 4 ? " (float)" : " (double)");
}

class AttentionMergeTest : public ::testing::Test {
 protected:
  void SetUp() override { rng_.seed(seed_); }
  // Scores ~ N(offset, scale²) with a share of −∞ (masked keys), never all −∞.
  std::vector<float> Scores(int n, float scale, float offset, bool with_masked) {
    std::normal_distribution<float> dist(offset, scale);
    std::vector<float> s(static_cast<size_t>(n));
    for (float& x : s) x = with_masked && rng_() % 5 == 0 ? -kInf : dist(rng_);
    s[rng_() % static_cast<uint32_t>(n)] = dist(rng_);
    return s;
  }
  uint32_t seed_ = cuda_test::TestSeed();
  std::mt19937 rng_;
};

#define SEED_TRACE() SCOPED_TRACE(::testing::Message() << "TPSERVE_TEST_SEED=" << seed_)

// Partials in F over `pieces` of the keys, in random order, merged.
template <typename F>
Partial<F> MergePieces(const std::vector<float>& s, const std::vector<float>& v, int hd,
                       const std::vector<std::pair<int, int>>& pieces, std::mt19937& rng) {
  std::vector<Partial<F>> parts;
  for (auto [b, e] : pieces) parts.push_back(ComputePartial<F>(s, v, hd, b, e));
  std::shuffle(parts.begin(), parts.end(), rng);
  return Merge(parts, hd);
}

TEST_F(AttentionMergeTest, AnyCutInAnyOrderEqualsOnePassSoftmax) {
  SEED_TRACE();
  for (int n : {1, 3, 7, 19, 111, 4097}) {
    for (int hd : {1, 3, 64}) {
      for (bool masked : {false, true}) {
        for (float scale : {0.5f, 4.f}) {
          const std::vector<float> s = Scores(n, scale, 0.f, masked);
          const std::vector<float> v = cuda_test::RandomBf16(rng_, int64_t{n} * hd);
          const std::vector<double> want = Reference(s, v, hd);
          for (int size : {0, 1, 7, 512, n}) {
            const std::vector<std::pair<int, int>> pieces = Cut(n, size, rng_);
            const std::string what = "n=" + std::to_string(n) + " hd=" + std::to_string(hd) +
                                     " masked=" + std::to_string(masked) + " scale=" + std::to_string(scale) +
                                     " piece size=" + std::to_string(size) + " (0 = random)";
            ExpectNear(MergePieces<double>(s, v, hd, pieces, rng_), want, what);
            ExpectNear(MergePieces<float>(s, v, hd, pieces, rng_), want, what);
          }
        }
      }
    }
  }
}

// The kernels merge twice: the warps of a block into a partition's partial,
// then the partitions. A merged partial is a partial like any other.
template <typename F>
Partial<F> MergeTwoLevels(const std::vector<float>& s, const std::vector<float>& v, int hd, std::mt19937& rng) {
  const int n = static_cast<int>(s.size());
  std::vector<Partial<F>> outer;
  for (auto [b, e] : Cut(n, 512, rng)) {  // the partitions, each cut again (the warps)
    std::vector<std::pair<int, int>> inner = Cut(e - b, 0, rng);
    for (auto& [ib, ie] : inner) ib += b, ie += b;
    outer.push_back(MergePieces<F>(s, v, hd, inner, rng));
  }
  std::shuffle(outer.begin(), outer.end(), rng);
  return Merge(outer, hd);
}

TEST_F(AttentionMergeTest, MergedPartialsMergeAgain) {
  SEED_TRACE();
  const int hd = 19;
  for (int n : {3, 111, 4097}) {
    const std::vector<float> s = Scores(n, 3.f, 0.f, true);
    const std::vector<float> v = cuda_test::RandomBf16(rng_, int64_t{n} * hd);
    const std::vector<double> want = Reference(s, v, hd);
    ExpectNear(MergeTwoLevels<double>(s, v, hd, rng_), want, "n=" + std::to_string(n));
    ExpectNear(MergeTwoLevels<float>(s, v, hd, rng_), want, "n=" + std::to_string(n));
  }
}

// Large scores: every exponent is taken relative to a max, so nothing overflows.
TEST_F(AttentionMergeTest, LargeScoresDoNotOverflow) {
  SEED_TRACE();
  const int n = 1000, hd = 7;
  for (float offset : {-3000.f, 80.f, 3000.f}) {
    const std::vector<float> s = Scores(n, 20.f, offset, false);
    const std::vector<float> v = cuda_test::RandomBf16(rng_, int64_t{n} * hd);
    const std::vector<std::pair<int, int>> pieces = Cut(n, 0, rng_);
    const std::vector<double> want = Reference(s, v, hd);
    ExpectNear(MergePieces<double>(s, v, hd, pieces, rng_), want, "offset=" + std::to_string(offset));
    ExpectNear(MergePieces<float>(s, v, hd, pieces, rng_), want, "offset=" + std::to_string(offset));
  }
}

TEST_F(AttentionMergeTest, EmptyPartialsAreSkippedAndAllEmptyGivesZero) {
  const float nan = std::nanf("");
  // One real partial between empty ones whose max and row are garbage.
  const float max[] = {nan, 1.5f, -kInf, 7.f};
  const float sum[] = {0.f, 2.f, 0.f, 0.f};
  const float out[] = {nan, 0.25f, nan, nan};
  EXPECT_EQ(CombinePartials(max, sum, out, 1, 4), 0.25f);
  const SoftmaxStats<float> stats = MergeStats(max, sum, 4);
  EXPECT_EQ(stats.max, 1.5f);
  EXPECT_EQ(stats.sum, 2.f);
  // Nothing but empty partials: no NaN, a zero row and (−∞, 0).
  const float empty_max[] = {-kInf, -kInf}, empty_sum[] = {0.f, 0.f}, empty_out[] = {nan, nan};
  EXPECT_EQ(CombinePartials(empty_max, empty_sum, empty_out, 1, 2), 0.f);
  EXPECT_EQ(MergeStats(empty_max, empty_sum, 2).max, -kInf);
  EXPECT_EQ(MergeStats(empty_max, empty_sum, 2).sum, 0.f);
  EXPECT_EQ(CombinePartials(empty_max, empty_sum, empty_out, 1, 0), 0.f);
  EXPECT_EQ(PartialWeight(-kInf, 0.f, -kInf), 0.f);
}

// The weight of a partial is its share of the denominator at the union's max.
TEST_F(AttentionMergeTest, PartialWeightRescalesToTheUnionMax) {
  EXPECT_DOUBLE_EQ(PartialWeight(1.0, 3.0, 1.0), 3.0);
  EXPECT_DOUBLE_EQ(PartialWeight(0.0, 2.0, std::log(2.0)), 1.0);
  EXPECT_EQ(PartialWeight(5.f, 0.f, 5.f), 0.f);
}

}  // namespace
}  // namespace tpserve::cuda
