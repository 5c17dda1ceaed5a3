// SpeculationPolicy: k follows the acceptance and the cost of verification;
// speculation stops when it does not pay and probes now and then.
#include "speculative/policy.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve::speculative {
namespace {

// c(k) of README's batch-1 row (k = 0..8) and of its batch-8 row.
const std::vector<double> kBatch1{1, 1.04, 1.19, 1.26, 1.30, 1.24, 1.17, 1.19, 2.09};
const std::vector<double> kBatch8{1, 2.00, 2.53, 2.80, 3.26, 4.35, 4.92, 5.21, 5.00};

TEST(SpeculationPolicyTest, GainIsExpectedTokensOverCost) {
  SpeculationPolicy p({.prior_acceptance = 0.5});
  EXPECT_DOUBLE_EQ(p.alpha(), 0.5);
  EXPECT_DOUBLE_EQ(p.Gain(0, kBatch1), 1.0);
  EXPECT_DOUBLE_EQ(p.Gain(2, kBatch1), (1 + 0.5 + 0.25) / 1.19);
}

TEST(SpeculationPolicyTest, AllAcceptedProposesTheMostAtBatch1) {
  SpeculationPolicy p({.max_speculative_tokens = 4});
  for (int i = 0; i < 20; ++i) {
    const int32_t k = p.Choose(kBatch1);
    p.Observe(k, k);
  }
  EXPECT_GT(p.alpha(), 0.95);
  EXPECT_EQ(p.Choose(kBatch1), 4);
}

TEST(SpeculationPolicyTest, NothingAcceptedTurnsItOffAndProbes) {
  SpeculationPolicy p({.max_speculative_tokens = 4, .probe_every = 8});
  std::vector<int32_t> ks;
  for (int i = 0; i < 40; ++i) {
    const int32_t k = p.Choose(kBatch1);
    ks.push_back(k);
    p.Observe(k, 0);
  }
  EXPECT_LT(p.alpha(), 0.1);
  // Off within a few steps; then one 1-token probe every 8 steps.
  int on = 0;
  for (size_t i = 8; i < ks.size(); ++i) on += ks[i] > 0;
  EXPECT_EQ(on, 4) << "steps 8..39";
  for (size_t i = 8; i < ks.size(); ++i) EXPECT_LE(ks[i], 1);
}

// Probes that are never accepted cost at most max_probe_cost on average
// whatever c(1) is: at batch 8 (c(1) = 2) one every 80 steps, not every 8.
TEST(SpeculationPolicyTest, ProbesSpaceOutAsTheyCostMore) {
  for (const std::vector<double>* cost : {&kBatch1, &kBatch8}) {
    SpeculationPolicy p({.max_speculative_tokens = 4, .prior_acceptance = 0.2, .probe_every = 8});
    double extra = 0;
    const int kSteps = 800;
    for (int i = 0; i < kSteps + 20; ++i) {
      const int32_t k = p.Choose(*cost);
      if (i >= 20) extra += (*cost)[static_cast<size_t>(k)] - 1;  // past the first steps' learning
      p.Observe(k, 0);
    }
    EXPECT_LE(extra / kSteps, 0.0125 + 1e-9) << "c(1) = " << (*cost)[1];
    EXPECT_GT(extra, 0) << "it still probes at c(1) = " << (*cost)[1];
  }
  SpeculationPolicy p({.probe_every = 8, .max_probe_cost = 0.0125});
  EXPECT_EQ(p.ProbeInterval(kBatch1), 8);   // (1.04 - 1) / 0.0125 = 3.2: the floor
  EXPECT_EQ(p.ProbeInterval(kBatch8), 80);  // (2.00 - 1) / 0.0125
  const std::vector<double> noisy{1, 0.9};
  EXPECT_EQ(p.ProbeInterval(noisy), 8);
}

TEST(SpeculationPolicyTest, ACostMeasuredBelowOneCountsAsOne) {
  SpeculationPolicy p({.prior_acceptance = 0.01, .prior_weight = 100});
  const std::vector<double> noisy{1, 0.9, 0.85};  // a loaded machine's k = 0 step ran slow
  EXPECT_DOUBLE_EQ(p.Gain(1, noisy), 1.01);
  EXPECT_EQ(p.Choose(noisy), 0);  // nothing is free
}

TEST(SpeculationPolicyTest, AtBatch8OnlyHighAcceptancePays) {
  SpeculationPolicy half({.prior_acceptance = 0.5});
  EXPECT_EQ(half.Choose(kBatch8), 0);  // 1.5 / 2.0 < 1
  SpeculationPolicy sure({.prior_acceptance = 0.99, .prior_weight = 100});
  EXPECT_GT(sure.Choose(kBatch8), 0);  // 4.9 / 3.26 for k = 4
}

TEST(SpeculationPolicyTest, RecoversWhenAcceptanceReturns) {
  SpeculationPolicy p({.max_speculative_tokens = 4, .probe_every = 4});
  for (int i = 0; i < 30; ++i) p.Observe(std::max(1, p.Choose(kBatch1)), 0);
  int32_t k = 0;
  for (int i = 0; i < 30 && k < 4; ++i) {
    k = p.Choose(kBatch1);
    p.Observe(k, k);
  }
  EXPECT_EQ(k, 4);
}

}  // namespace
}  // namespace tpserve::speculative
