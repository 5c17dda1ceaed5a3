// Token-level controls (sampling/token_controls.h) in the host sampler:
// logit_bias shifts the distribution exactly as computed by hand, -100 / +100
// all but ban / force, allowed_token_ids restricts (and equals the masked-row
// oracle token for token), bad words ban single tokens always and a
// multi-token word's last token after its prefix, also after a preemption.
#include "sampling/token_controls.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "sampling/limits.h"
#include "sampling/sampler.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

std::shared_ptr<const TokenControls> Controls(TokenControls c) {
  NormalizeTokenControls(c);
  return std::make_shared<const TokenControls>(std::move(c));
}

int32_t SampleOne(SequenceSamplingState& seq, const std::vector<float>& logits) {
  SequenceSamplingState* seqs[] = {&seq};
  const int64_t v = static_cast<int64_t>(logits.size());
  return Sample(logits, v, v, seqs)[0].token;
}

// The token an inverse-CDF draw at u picks over probabilities `p` (id order).
int32_t InverseCdf(const std::vector<double>& p, double u) {
  double cum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    cum += p[i];
    if (cum > u) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(p.size() - 1);
}

// Logits {0, 0, 0, 0} with bias b on token 1: p(1) = e^b / (e^b + 3), the
// others 1 / (e^b + 3). The sampler's draws are checked one by one against
// that CDF at the very uniforms it drew (a twin state with the same seed),
// skipping a uniform within 1e-9 of a boundary (each b is exact in float, so
// the sampler's weights are exp of exact values in double: its boundaries
// are within ~1e-15 of these).
TEST(TokenControls, LogitBiasShiftsTheDistributionAsComputedByHand) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (const float b : {1.0f, -2.5f, 4.0f}) {
    SCOPED_TRACE("bias=" + std::to_string(b));
    SamplingParams params;
    params.seed = seed;
    params.controls = Controls({.logit_bias = {{1, b}}});
    SequenceSamplingState seq(params), twin(params);
    const double eb = std::exp(static_cast<double>(b)), z = eb + 3;
    const std::vector<double> p = {1 / z, eb / z, 1 / z, 1 / z};
    std::vector<int> counts(4, 0);
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      const double u = twin.NextUniform();
      const int32_t got = SampleOne(seq, {0, 0, 0, 0});
      ++counts[static_cast<size_t>(got)];
      double cum = 0;
      bool near = false;
      for (double q : p) near = near || std::abs((cum += q) - u) < 1e-9;
      if (!near) {
        EXPECT_EQ(got, InverseCdf(p, u)) << "u=" << u;
      }
    }
    // And the frequencies: within 6 standard deviations of the binomial (fixed seed: deterministic).
    for (int t = 0; t < 4; ++t) {
      const double sd = std::sqrt(n * p[t] * (1 - p[t]));
      EXPECT_NEAR(counts[t], n * p[t], 6 * sd) << "token " << t;
    }
  }
}

TEST(TokenControls, BiasOfMinus100BansAndPlus100Forces) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(257);
  for (float& v : x) v = normal(rng);
  SamplingParams ban;
  ban.seed = seed;
  ban.temperature = 1.5f;
  const auto best = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
  ban.controls = Controls({.logit_bias = {{best, -100.0f}, {3, -100.0f}}});
  SequenceSamplingState banned(ban);
  for (int i = 0; i < 5000; ++i) {
    const int32_t t = SampleOne(banned, x);
    ASSERT_NE(t, best);
    ASSERT_NE(t, 3);
  }
  SamplingParams force = ban;
  force.controls = Controls({.logit_bias = {{42, 100.0f}}});
  SequenceSamplingState forced(force);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(SampleOne(forced, x), 42);
}

// allowed_token_ids: only they are drawn, and the gathered row gives exactly
// the tokens of the oracle that masks every other token with -inf on the
// whole row and samples it without controls (same seed), for every filter
// and penalty, greedy included; log-probs stay those of the raw row.
TEST(TokenControls, AllowedTokenIdsEqualTheMaskedRowOracle) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int32_t vocab = 733;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::vector<int32_t> allowed;
    std::bernoulli_distribution pick(trial % 3 == 0 ? 0.01 : 0.3);
    for (int32_t t = 0; t < vocab; ++t) {
      if (pick(rng)) allowed.push_back(t);
    }
    if (allowed.empty()) allowed.push_back(vocab - 1);
    SamplingParams p;
    p.seed = seed + static_cast<uint64_t>(trial);
    p.temperature = trial % 5 == 0 ? 0.0f : std::uniform_real_distribution<float>(0.3f, 2.0f)(rng);
    p.top_k = trial % 2 == 0 ? 7 : -1;
    p.top_p = trial % 3 == 1 ? 0.8f : 1.0f;
    p.min_p = trial % 4 == 3 ? 0.05f : 0.0f;
    p.repetition_penalty = trial % 6 == 2 ? 1.3f : 1.0f;
    p.frequency_penalty = trial % 7 == 1 ? 0.5f : 0.0f;
    p.logprobs = 3;
    std::vector<int32_t> prompt = {allowed[0], 5, 9};
    SamplingParams oracle_params = p;
    p.controls = Controls({.logit_bias = {{allowed.back(), 1.5f}, {4, -3.0f}}, .allowed_token_ids = allowed});
    SequenceSamplingState fast(p, prompt), oracle(oracle_params, prompt);
    for (int step = 0; step < 12; ++step) {
      std::vector<float> x(vocab);
      for (float& v : x) v = normal(rng);
      std::vector<float> masked(vocab, -std::numeric_limits<float>::infinity());
      for (int32_t t : allowed) masked[t] = x[t] + (t == allowed.back() ? 1.5f : t == 4 ? -3.0f : 0.0f);
      SequenceSamplingState* f[] = {&fast};
      SequenceSamplingState* o[] = {&oracle};
      const SampledToken got = Sample(x, vocab, vocab, f)[0];
      const SampledToken want = Sample(masked, vocab, vocab, o)[0];
      ASSERT_TRUE(std::binary_search(allowed.begin(), allowed.end(), got.token));
      ASSERT_EQ(got.token, want.token) << "step " << step;
      // Raw log-probs: of the unmasked row.
      double z = 0;
      const float mx = *std::max_element(x.begin(), x.end());
      for (float v : x) z += std::exp(static_cast<double>(v) - mx);
      EXPECT_NEAR(got.logprob, x[got.token] - mx - std::log(z), 1e-5);
    }
  }
}

// Greedy rows over 16 tokens where `favourite` leads and `runner_up` follows.
std::vector<float> Favouring(int32_t favourite, int32_t runner_up) {
  std::vector<float> x(16, 0.0f);
  x[favourite] = 5.0f;
  x[runner_up] = 4.0f;
  return x;
}

TEST(TokenControls, BadWordsBanSingleTokensAlwaysAndMultiTokenWordsAfterTheirPrefix) {
  SamplingParams p;
  p.temperature = 0;
  p.controls = Controls({.bad_words = {{5}, {7, 8}, {1, 2, 3}}});
  SequenceSamplingState seq(p);
  EXPECT_EQ(SampleOne(seq, Favouring(5, 6)), 6);  // 5 is a one-token bad word
  EXPECT_EQ(SampleOne(seq, Favouring(8, 9)), 8);  // 8 alone is fine: the output does not end with 7
  EXPECT_EQ(SampleOne(seq, Favouring(7, 9)), 7);
  EXPECT_EQ(SampleOne(seq, Favouring(8, 9)), 9);  // after 7, 8 would complete "7 8"
  EXPECT_EQ(SampleOne(seq, Favouring(1, 0)), 1);
  EXPECT_EQ(SampleOne(seq, Favouring(2, 0)), 2);
  EXPECT_EQ(SampleOne(seq, Favouring(3, 0)), 0);  // "1 2 3"
  EXPECT_EQ(SampleOne(seq, Favouring(3, 0)), 3);  // the tail is now "2 0": 3 is free again
  // A bias cannot bring a banned token back.
  SamplingParams biased = p;
  biased.controls = Controls({.logit_bias = {{5, 100.0f}}, .bad_words = {{5}}});
  SequenceSamplingState b(biased);
  EXPECT_EQ(SampleOne(b, Favouring(5, 6)), 6);
  // After a preemption the restored output holds the tail: "7" then 8 is banned.
  const std::vector<int32_t> output = {4, 4, 7};
  SequenceSamplingState restored(p, {}, output);
  EXPECT_EQ(SampleOne(restored, Favouring(8, 9)), 9);
  // A long output keeps only what the longest word needs, and still matches.
  SequenceSamplingState long_run(p);
  for (int i = 0; i < 1000; ++i) long_run.AppendOutput(i % 16 == 5 ? 0 : i % 16);
  long_run.AppendOutput(1);
  long_run.AppendOutput(2);
  EXPECT_EQ(SampleOne(long_run, Favouring(3, 0)), 0);
}

TEST(TokenControls, BannedTokensFollowTheTail) {
  TokenControls c{.bad_words = {{9}, {1, 2}, {3, 1, 2}}};
  std::vector<int32_t> out;
  AppendBannedTokens(c, std::vector<int32_t>{}, out);
  EXPECT_EQ(out, (std::vector<int32_t>{9}));
  out.clear();
  AppendBannedTokens(c, std::vector<int32_t>{3, 1}, out);
  EXPECT_EQ(out, (std::vector<int32_t>{9, 2, 2}));
  out.clear();
  AppendBannedTokens(c, std::vector<int32_t>{4, 1}, out);
  EXPECT_EQ(out, (std::vector<int32_t>{9, 2}));
  std::vector<std::pair<int32_t, float>> edits;
  TokenControls b{.logit_bias = {{2, 3.0f}, {7, -1.0f}, {900, 2.0f}}};
  RowEdits(b, std::vector<int32_t>{9, 2, 2}, 800, edits);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(edits, (std::vector<std::pair<int32_t, float>>{{2, -inf}, {7, -1.0f}, {9, -inf}}));
}

TEST(TokenControls, NormalizeSortsAndValidateNamesTheLimit) {
  TokenControls c{.logit_bias = {{7, 1.0f}, {3, 2.0f}, {7, 5.0f}}, .allowed_token_ids = {9, 2, 9, 4}};
  NormalizeTokenControls(c);
  EXPECT_EQ(c.logit_bias, (std::vector<std::pair<int32_t, float>>{{3, 2.0f}, {7, 5.0f}}));
  EXPECT_EQ(c.allowed_token_ids, (std::vector<int32_t>{2, 4, 9}));
  EXPECT_TRUE(ValidateTokenControls(c, 10).ok());
  EXPECT_EQ(ValidateTokenControls(c, 9).code(), absl::StatusCode::kInvalidArgument);

  TokenControls range{.logit_bias = {{1, 100.5f}}};
  EXPECT_TRUE(absl::StrContains(ValidateTokenControls(range, 10).message(), "[-100, 100]"));
  TokenControls many;
  for (int32_t t = 0; t <= kMaxLogitBias; ++t) many.logit_bias.emplace_back(t, 1.0f);
  EXPECT_TRUE(absl::StrContains(ValidateTokenControls(many, 1000).message(), "limit of 300"));
  TokenControls words;
  words.bad_words.assign(kMaxBadWords, std::vector<int32_t>(9, 1));
  EXPECT_TRUE(absl::StrContains(ValidateTokenControls(words, 10).message(), "1024"));
  SamplingParams p;
  p.controls = std::make_shared<const TokenControls>(range);
  EXPECT_EQ(ValidateSamplingParams(p).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
