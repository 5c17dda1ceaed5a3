#include "tests/testing/chi_square.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

namespace tpserve::testing_util {
namespace {

constexpr double kEps = 1e-15;
constexpr double kTiny = 1e-300;
constexpr int kMaxTerms = 100000;

// exp(-x + a ln x - ln Gamma(a)): the factor both expansions share.
double Prefactor(double a, double x) { return std::exp(-x + a * std::log(x) - std::lgamma(a)); }

// The regularized lower incomplete gamma P(a, x) by its series (x < a + 1).
double LowerSeries(double a, double x) {
  double term = 1 / a, sum = term;
  for (int n = 1; n < kMaxTerms && std::abs(term) > std::abs(sum) * kEps; ++n) {
    term *= x / (a + n);
    sum += term;
  }
  return sum * Prefactor(a, x);
}

// The regularized upper incomplete gamma Q(a, x) by its continued fraction
// (x >= a + 1), evaluated by the modified Lentz method.
double UpperFraction(double a, double x) {
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, h = d;
  for (int i = 1; i < kMaxTerms; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double step = d * c;
    h *= step;
    if (std::abs(step - 1) < kEps) break;
  }
  return h * Prefactor(a, x);
}

}  // namespace

double ChiSquareUpperTail(double x, int64_t dof) {
  if (dof < 1) std::abort();
  if (x <= 0) return 1;
  const double a = static_cast<double>(dof) / 2, half = x / 2;
  return half < a + 1 ? 1 - LowerSeries(a, half) : UpperFraction(a, half);
}

double ChiSquareThreshold(int64_t dof, double false_alarm) {
  if (dof < 1 || !(false_alarm > 0 && false_alarm < 1)) std::abort();
  double lo = 0, hi = static_cast<double>(dof) + 10;
  while (ChiSquareUpperTail(hi, dof) > false_alarm) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {  // the tail falls as x grows
    const double mid = (lo + hi) / 2;
    (ChiSquareUpperTail(mid, dof) > false_alarm ? lo : hi) = mid;
  }
  return hi;
}

Homogeneity TwoSampleChiSquare(std::span<const int64_t> a, std::span<const int64_t> b, double min_expected) {
  if (a.size() != b.size()) std::abort();
  double n_a = 0, n_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    n_a += static_cast<double>(a[i]);
    n_b += static_cast<double>(b[i]);
  }
  const double n = n_a + n_b;
  Homogeneity h;
  if (n_a == 0 || n_b == 0) return h;
  // A cell's smaller expected count: its pooled count's share of the smaller sample.
  auto smaller_expected = [&](const std::pair<double, double>& c) { return std::min(n_a, n_b) * (c.first + c.second) / n; };
  std::vector<std::pair<double, double>> cells;  // (count in a, count in b) of each cell used
  std::pair<double, double> pool{0, 0};
  for (size_t i = 0; i < a.size(); ++i) {
    const std::pair<double, double> c{static_cast<double>(a[i]), static_cast<double>(b[i])};
    if (c.first + c.second == 0) continue;
    std::pair<double, double>& into = smaller_expected(c) < min_expected ? pool : cells.emplace_back(0, 0);
    into.first += c.first;
    into.second += c.second;
  }
  if (pool.first + pool.second > 0) {
    if (smaller_expected(pool) >= min_expected || cells.empty()) {
      cells.push_back(pool);
    } else {  // too small alone: into the smallest cell
      auto smallest = std::min_element(cells.begin(), cells.end(), [](const auto& x, const auto& y) {
        return x.first + x.second < y.first + y.second;
      });
      smallest->first += pool.first;
      smallest->second += pool.second;
    }
  }
  for (const auto& [in_a, in_b] : cells) {
    const double e_a = n_a * (in_a + in_b) / n, e_b = n_b * (in_a + in_b) / n;
    h.statistic += (in_a - e_a) * (in_a - e_a) / e_a + (in_b - e_b) * (in_b - e_b) / e_b;
  }
  h.cells = std::ssize(cells);
  h.dof = h.cells - 1;
  return h;
}

}  // namespace tpserve::testing_util
