// SpeculationPolicy: how many tokens to propose for one sequence this step,
// so that speculation never makes it slower than no speculation by more than
// noise (issue 27, item 5): from what a verification step costs at the step's
// batch size and what the sequence's recent steps accepted.
//
//   cost[k]   c(k): a step with k proposed tokens per sequence over the
//             one-token step (cost[0] = 1), measured (bench/spec_decode_bench);
//             taken as at least 1 (a measurement below it is noise: a step
//             with more rows never costs less)
//   alpha     the sequence's acceptance estimate: each proposed token right
//             with probability alpha, given the ones before it were; a step
//             that proposed n and accepted a counts a successes and, when
//             a < n, one failure, both decayed by `decay` per step
//   E(k)      expected tokens of a step proposing k: 1 + alpha + ... + alpha^k
//   choice    the k in [1, max] with the largest E(k) / c(k) if that is at
//             least min_gain, else 0; a sequence at 0 proposes 1 token every
//             probe_every steps, so a change in what it generates is noticed,
//             or more rarely where a probe costs more: every
//             ceil((c(1) - 1) / max_probe_cost) steps, so that probes that are
//             never accepted add at most max_probe_cost to the steps on average
//             (at batch 64, where c(1) is about 2, every 80 steps: 1.25%, where
//             every 8 would have cost 12.5%)
//
// Thread-compatible; one per sequence.
#pragma once

#include <cstdint>
#include <span>

namespace tpserve::speculative {

struct PolicyOptions {
  int32_t max_speculative_tokens = 4;  // the most k chosen, >= 1
  double prior_acceptance = 0.5;       // a new sequence's alpha
  double prior_weight = 2;             // how many trials the prior counts as
  double decay = 0.9;                  // per step: the weight left on older steps
  double min_gain = 1.05;              // E(k) / c(k) needed to propose at all
  int32_t probe_every = 8;             // the fewest steps at 0 before a 1-token probe
  double max_probe_cost = 0.0125;      // the most never-accepted probes may add, on average, to the
                                       // steps: a probe every max(probe_every, (c(1) - 1) / this)
};

class SpeculationPolicy {
 public:
  explicit SpeculationPolicy(const PolicyOptions& options = {});

  // The k for this step; cost[k] for k = 0..cost.size() - 1 (k beyond the
  // table is not chosen). Counts a step at 0 towards the next probe.
  int32_t Choose(std::span<const double> cost);
  // What the step that proposed `proposed` tokens accepted.
  void Observe(int32_t proposed, int32_t accepted);

  double alpha() const { return successes_ / trials_; }
  // E(k) / c(k) for the current alpha.
  double Gain(int32_t k, std::span<const double> cost) const;
  // Steps at 0 between two probes at these costs (see above).
  int32_t ProbeInterval(std::span<const double> cost) const;

 private:
  PolicyOptions options_;
  double successes_;
  double trials_;
  int32_t idle_steps_ = 0;  // consecutive steps chosen 0
};

}  // namespace tpserve::speculative
