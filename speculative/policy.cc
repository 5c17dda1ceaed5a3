#include "speculative/policy.h"

#include <algorithm>
#include <cmath>

namespace tpserve::speculative {

SpeculationPolicy::SpeculationPolicy(const PolicyOptions& options)
    : options_(options),
      successes_(options.prior_acceptance * options.prior_weight),
      trials_(options.prior_weight) {}

double SpeculationPolicy::Gain(int32_t k, std::span<const double> cost) const {
  const double a = alpha();
  double expected = 1, term = 1;
  for (int32_t i = 0; i < k; ++i) expected += (term *= a);
  return expected / std::max(1.0, cost[static_cast<size_t>(k)]);
}

int32_t SpeculationPolicy::ProbeInterval(std::span<const double> cost) const {
  const double extra = cost.size() > 1 ? std::max(0.0, cost[1] - 1) : 0;  // one probe's cost over a plain step
  const double spaced = options_.max_probe_cost > 0 ? std::ceil(extra / options_.max_probe_cost) : 0;
  return static_cast<int32_t>(std::clamp(spaced, static_cast<double>(options_.probe_every), 1e6));
}

int32_t SpeculationPolicy::Choose(std::span<const double> cost) {
  const int32_t most = std::min<int32_t>(options_.max_speculative_tokens, static_cast<int32_t>(cost.size()) - 1);
  int32_t best = 0;
  double best_gain = options_.min_gain;
  for (int32_t k = 1; k <= most; ++k) {
    const double g = Gain(k, cost);
    if (g >= best_gain) {
      best = k;
      best_gain = g;
    }
  }
  if (best > 0 || most < 1) {
    idle_steps_ = 0;
    return best;
  }
  if (++idle_steps_ >= ProbeInterval(cost)) {
    idle_steps_ = 0;
    return 1;  // a probe
  }
  return 0;
}

void SpeculationPolicy::Observe(int32_t proposed, int32_t accepted) {
  if (proposed <= 0) return;
  successes_ = successes_ * options_.decay + accepted;
  trials_ = trials_ * options_.decay + accepted + (accepted < proposed ? 1 : 0);
}

}  // namespace tpserve::speculative
