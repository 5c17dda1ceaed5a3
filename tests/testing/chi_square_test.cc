// The chi-square helpers (chi_square.h): the tail against its closed forms
// and published quantiles, the threshold as its inverse, the two-sample
// statistic by hand, and its false alarms at the stated rate on samples that
// do come from one distribution.
#include "tests/testing/chi_square.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/seed.h"

namespace tpserve::testing_util {
namespace {

// Q(x; dof) in closed form: erfc for 1 degree of freedom, e^(-x/2) for 2,
// then Q(x; k + 2) = Q(x; k) + (x/2)^(k/2) e^(-x/2) / Gamma(k/2 + 1).
double ClosedFormTail(double x, int64_t dof) {
  double q = dof % 2 == 1 ? std::erfc(std::sqrt(x / 2)) : std::exp(-x / 2);
  for (int64_t k = dof % 2 == 1 ? 1 : 2; k < dof; k += 2) {
    const double half_k = static_cast<double>(k) / 2;
    q += std::exp(half_k * std::log(x / 2) - x / 2 - std::lgamma(half_k + 1));
  }
  return q;
}

TEST(ChiSquareTest, TailMatchesTheClosedForms) {
  for (int64_t dof = 1; dof <= 60; ++dof) {
    for (double x : {0.01, 0.5, 1.0, 3.0, 9.5, 20.0, 47.0, 90.0, 150.0}) {
      const double want = ClosedFormTail(x, dof), got = ChiSquareUpperTail(x, dof);
      EXPECT_NEAR(got, want, 1e-11 + 1e-9 * want) << "dof " << dof << ", x " << x;
    }
  }
  EXPECT_EQ(ChiSquareUpperTail(0, 5), 1.0);
}

TEST(ChiSquareTest, ThresholdsAreThePublishedQuantiles) {
  // scipy.stats.chi2.isf(alpha, dof), also in every table.
  EXPECT_NEAR(ChiSquareThreshold(1, 0.05), 3.841458820694124, 1e-9);
  EXPECT_NEAR(ChiSquareThreshold(10, 0.05), 18.307038053275146, 1e-9);
  EXPECT_NEAR(ChiSquareThreshold(100, 0.01), 135.80672317102676, 1e-8);
  EXPECT_NEAR(ChiSquareThreshold(2, 1e-6), -2 * std::log(1e-6), 1e-9);  // Q(x; 2) = e^(-x/2)
  for (int64_t dof : {1, 7, 64, 333}) {
    for (double alpha : {0.5, 1e-3, 1e-6, 1e-9}) {
      EXPECT_NEAR(ChiSquareUpperTail(ChiSquareThreshold(dof, alpha), dof), alpha, 1e-9 * alpha)
          << "dof " << dof << ", alpha " << alpha;
    }
  }
}

TEST(ChiSquareTest, TwoSampleStatisticByHand) {
  // Equal samples of 30: each cell expects 15 in each; (5^2 / 15) four times.
  Homogeneity h = TwoSampleChiSquare(std::vector<int64_t>{10, 20}, std::vector<int64_t>{20, 10});
  EXPECT_NEAR(h.statistic, 4 * 25.0 / 15, 1e-12);
  EXPECT_EQ(h.dof, 1);
  // Cells expecting fewer than 5 are pooled (here 2 + 1 + 0 + 3: expected 3 each,
  // still too few, so they join the smallest cell, 40 + 40 -> 43 + 44).
  h = TwoSampleChiSquare(std::vector<int64_t>{100, 40, 2, 0, 0}, std::vector<int64_t>{100, 40, 1, 3, 0});
  EXPECT_EQ(h.cells, 2);
  // n_a = 142, n_b = 144: cells (100, 100) and (42, 44).
  const double n_a = 142, n_b = 144, n = 286;
  double want = 0;
  for (auto [x, y] : {std::pair{100.0, 100.0}, std::pair{42.0, 44.0}}) {
    const double e_a = n_a * (x + y) / n, e_b = n_b * (x + y) / n;
    want += (x - e_a) * (x - e_a) / e_a + (y - e_b) * (y - e_b) / e_b;
  }
  EXPECT_NEAR(h.statistic, want, 1e-12);
}

TEST(ChiSquareTest, FalseAlarmsAtTheStatedRate) {
  // 1,000 pairs of samples from one distribution (rare cells included, so the
  // pooling is exercised): the test at alpha = 0.1 rejects about 100 of them.
  // The count is Binomial(1000, ~0.1) (sd 9.5): [55, 145] is over 4.5 sd each side.
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::discrete_distribution<int> cell({30, 20, 15, 10, 10, 8, 4, 2, 0.5, 0.3, 0.2});
  int rejected = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    std::vector<int64_t> a(11, 0), b(11, 0);
    for (int i = 0; i < 600; ++i) ++a[static_cast<size_t>(cell(rng))];
    for (int i = 0; i < 900; ++i) ++b[static_cast<size_t>(cell(rng))];
    const Homogeneity h = TwoSampleChiSquare(a, b);
    if (h.statistic >= ChiSquareThreshold(h.dof, 0.1)) ++rejected;
  }
  EXPECT_GE(rejected, 55);
  EXPECT_LE(rejected, 145);
}

}  // namespace
}  // namespace tpserve::testing_util
