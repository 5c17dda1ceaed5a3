// Pearson's chi-square for the tests of sampled distributions, with its
// threshold taken from the chi-square distribution at a stated false-alarm
// probability (never a hand-tuned constant).
//
// A test draws its samples from fixed seeds (tests/testing/seed.h), so it
// passes or fails the same way on every run; the false-alarm probability is
// the chance that a correct sampler fails with seeds drawn at random (what
// scripts/seed-sweep.sh does).
#pragma once

#include <cstdint>
#include <span>

namespace tpserve::testing_util {

// P(X >= x) for X ~ chi-square with `dof` >= 1 degrees of freedom: the
// regularized upper incomplete gamma Q(dof / 2, x / 2), to about 1e-12
// relative (series below a + 1, continued fraction above).
double ChiSquareUpperTail(double x, int64_t dof);

// The x with ChiSquareUpperTail(x, dof) = false_alarm, false_alarm in (0, 1):
// reject "same distribution" when a statistic with `dof` degrees of freedom
// reaches it.
double ChiSquareThreshold(int64_t dof, double false_alarm);

// The two-sample (homogeneity) test: are counts `a` [C] and `b` [C] of the
// same C cells, from n_a = sum(a) and n_b = sum(b) independent draws, drawn
// from one distribution? Each cell's expected count in a sample is its share
// of the pooled counts; cells whose smaller expected count is below
// `min_expected` are pooled into one cell (dropped if that one is still below
// it), so the statistic's distribution is close to chi-square.
struct Homogeneity {
  double statistic = 0;  // sum over cells and samples of (observed - expected)^2 / expected
  int64_t dof = 0;       // cells used - 1
  int64_t cells = 0;     // cells used (the pooled one included)
};
Homogeneity TwoSampleChiSquare(std::span<const int64_t> a, std::span<const int64_t> b, double min_expected = 5);

}  // namespace tpserve::testing_util
