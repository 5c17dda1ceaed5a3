// The sampler against its formulas: greedy, filters, the sampled distribution,
// per-sequence seeds, penalties, log-probs and parameter validation.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/testing/seed.h"

namespace tpserve {
namespace {

std::vector<float> RandomLogits(std::mt19937_64& rng, int64_t n, float stddev = 2.0f) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// Samples `n` tokens for one sequence from the same logits row.
std::vector<int32_t> Draws(SequenceSamplingState& seq, const std::vector<float>& logits, int n) {
  std::vector<int32_t> tokens;
  SequenceSamplingState* seqs[] = {&seq};
  const int64_t v = static_cast<int64_t>(logits.size());
  for (int i = 0; i < n; ++i) tokens.push_back(Sample(logits, v, v, seqs)[0].token);
  return tokens;
}

TEST(Sampler, GreedyIsArgmaxAndTiesGoToTheLowestId) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t vocab = 4097;
  SamplingParams greedy;
  greedy.temperature = 0;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> x = RandomLogits(rng, vocab);
    SequenceSamplingState seq(greedy);
    const auto want = std::max_element(x.begin(), x.end()) - x.begin();
    EXPECT_EQ(Draws(seq, x, 1)[0], want);
  }
  std::vector<float> tie = {0.5f, 3.0f, -1.0f, 3.0f, 3.0f, 2.0f, 1.0f};
  SequenceSamplingState seq(greedy);
  EXPECT_EQ(Draws(seq, tie, 3), (std::vector<int32_t>{1, 1, 1}));
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  SamplingParams top_k1;
  top_k1.top_k = 1;
  top_k1.temperature = 1.5f;
  SamplingParams top_p_tiny;
  top_p_tiny.top_p = 1e-6f;
  top_p_tiny.temperature = 1.0f;
  for (int trial = 0; trial < 20; ++trial) {
    // Small spread so that a real draw would often pick something else.
    std::vector<float> x = RandomLogits(rng, 111, 0.3f);
    const int32_t want = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
    SequenceSamplingState a(top_k1), b(top_p_tiny);
    EXPECT_EQ(Draws(a, x, 5), std::vector<int32_t>(5, want));
    EXPECT_EQ(Draws(b, x, 5), std::vector<int32_t>(5, want));
  }
}

// Counts of `n` draws per token.
std::vector<int> Histogram(const SamplingParams& p, const std::vector<float>& logits, int n) {
  SequenceSamplingState seq(p);
  std::vector<int> counts(logits.size(), 0);
  for (int32_t t : Draws(seq, logits, n)) ++counts.at(t);
  return counts;
}

// Pearson's chi-square of `counts` against probabilities `probs`.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs) {
  double n = 0, chi2 = 0;
  for (int c : counts) n += c;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0 but was drawn";
      continue;
    }
    const double e = n * probs[i];
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

TEST(Sampler, DrawsFollowTheTemperedSoftmax) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> logits;
  for (double v : p) logits.push_back(static_cast<float>(std::log(v)) + 7.0f);
  const int n = 40000;
  // Chi-square with 3 degrees of freedom exceeds 30 with probability ~1e-6.
  SamplingParams t1;
  t1.seed = 20240611;
  EXPECT_LT(ChiSquare(Histogram(t1, logits, n), p), 30.0);

  SamplingParams t2 = t1;  // temperature 2: probabilities ∝ sqrt(p)
  t2.temperature = 2.0f;
  std::vector<double> q;
  double z = 0;
  for (double v : p) z += std::sqrt(v);
  for (double v : p) q.push_back(std::sqrt(v) / z);
  EXPECT_LT(ChiSquare(Histogram(t2, logits, n), q), 30.0);
  // The test can fail: the untempered distribution is far from the tempered draws.
  EXPECT_GT(ChiSquare(Histogram(t2, logits, n), p), 100.0);
}

TEST(Sampler, MinPTopKAndTopPKeepExactlyTheirTokens) {
  // Probabilities 0.4, 0.3, 0.2, 0.1 (ratios to the max: 1, .75, .5, .25).
  const std::vector<double> p = {0.4, 0.3, 0.2, 0.1};
  std::vector<float> logits;
  for (double v : p) logits.push_back(static_cast<float>(std::log(v)));
  const int n = 20000;
  auto renormalised = [&](int keep) {
    std::vector<double> q(p.begin(), p.end());
    double z = 0;
    for (int i = 0; i < 4; ++i) z += i < keep ? q[i] : 0;
    for (int i = 0; i < 4; ++i) q[i] = i < keep ? q[i] / z : 0;
    return q;
  };
  SamplingParams min_p;
  min_p.seed = 7;
  min_p.min_p = 0.6f;  // keeps ratios >= 0.6: tokens 0 and 1
  EXPECT_LT(ChiSquare(Histogram(min_p, logits, n), renormalised(2)), 30.0);
  SamplingParams top_k;
  top_k.seed = 8;
  top_k.top_k = 3;
  EXPECT_LT(ChiSquare(Histogram(top_k, logits, n), renormalised(3)), 30.0);
  SamplingParams top_p;
  top_p.seed = 9;
  top_p.top_p = 0.65f;  // 0.4 < 0.65, 0.4 + 0.3 >= 0.65: tokens 0 and 1
  EXPECT_LT(ChiSquare(Histogram(top_p, logits, n), renormalised(2)), 30.0);
  top_p.top_p = 0.75f;  // 0.7 < 0.75: tokens 0, 1, 2
  EXPECT_LT(ChiSquare(Histogram(top_p, logits, n), renormalised(3)), 30.0);
  // top-p after top-k renormalises: top_k 2 leaves {0.4, 0.3} -> {4/7, 3/7};
  // top_p 0.5 then keeps token 0 alone.
  SamplingParams both;
  both.seed = 10;
  both.top_k = 2;
  both.top_p = 0.5f;
  EXPECT_LT(ChiSquare(Histogram(both, logits, n), renormalised(1)), 30.0);
}

TEST(Sampler, TopPNucleusLargerThanTheFirstPartialSort) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t vocab = 4099;
  const std::vector<float> x = RandomLogits(rng, vocab, 0.5f);  // a flat distribution
  SamplingParams p;
  p.top_p = 0.6f;
  // The nucleus by a full sort in double.
  const double max_x = *std::max_element(x.begin(), x.end());
  std::vector<double> w(vocab);
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) total += (w[i] = std::exp(double(x[i]) - max_x));
  std::vector<int32_t> order(vocab);
  for (int32_t i = 0; i < vocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return w[a] > w[b]; });
  std::vector<int32_t> rank(vocab);
  for (int32_t r = 0; r < vocab; ++r) rank[order[r]] = r;
  int32_t nucleus = 0;
  for (double before = 0; before < 0.6 * total; ++nucleus) before += w[order[nucleus]];
  ASSERT_GT(nucleus, 1500) << "the test needs a nucleus beyond the first 1024 sorted tokens";
  SequenceSamplingState seq(p);
  int beyond_1024 = 0;
  for (int32_t t : Draws(seq, x, 400)) {
    EXPECT_LT(rank[t], nucleus + 1) << "token " << t << " is outside the top-p nucleus";
    beyond_1024 += rank[t] >= 1024;
  }
  EXPECT_GT(beyond_1024, 0);
}

TEST(Sampler, SameSeedSameTokensWhateverTheBatch) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t vocab = 257, stride = 260, steps = 25;
  SamplingParams target;
  target.seed = 1234;
  target.temperature = 0.9f;
  target.top_k = 50;
  target.top_p = 0.95f;
  target.presence_penalty = 0.3f;
  std::vector<std::vector<float>> rows;  // the target's logits per step, [vocab] each
  for (int i = 0; i < steps; ++i) rows.push_back(RandomLogits(rng, vocab, 1.0f));

  // Runs the target at `position` of a batch of `batch` sequences; the others
  // get other parameters (some unseeded, one with the same seed) and other logits.
  auto run = [&](int batch, int position, SamplingParams params) {
    std::vector<SequenceSamplingState> states;
    for (int b = 0; b < batch; ++b) {
      SamplingParams other;
      other.temperature = 0.5f + b;
      if (b % 2 == 0) other.seed = 1234;
      states.emplace_back(b == position ? params : other, std::vector<int32_t>{1, 2, 3});
    }
    std::vector<SequenceSamplingState*> ptrs;
    for (auto& s : states) ptrs.push_back(&s);
    std::vector<int32_t> tokens;
    for (int i = 0; i < steps; ++i) {
      std::vector<float> logits(batch * stride, 1e9f);  // padding columns must be ignored
      for (int b = 0; b < batch; ++b) {
        std::vector<float> row = b == position ? rows[i] : RandomLogits(rng, vocab);
        std::copy(row.begin(), row.end(), logits.begin() + b * stride);
      }
      const std::vector<SampledToken> out = Sample(logits, stride, vocab, ptrs);
      for (const SampledToken& t : out) EXPECT_LT(t.token, vocab);
      tokens.push_back(out[position].token);
    }
    return tokens;
  };
  const std::vector<int32_t> alone = run(1, 0, target);
  EXPECT_EQ(run(4, 2, target), alone);
  EXPECT_EQ(run(3, 0, target), alone);
  EXPECT_EQ(run(5, 4, target), alone);
  SamplingParams other_seed = target;
  other_seed.seed = 1235;
  EXPECT_NE(run(1, 0, other_seed), alone);
}

TEST(Sampler, PenaltiesFollowTheFormulas) {
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.25f;
  // prompt: 1, 3 (twice); output: 3 once, 5 three times; 9 is outside the vocab.
  const std::vector<int32_t> prompt = {1, 3, 3, 9};
  const std::vector<int32_t> output = {3, 5, 5, 5};
  SequenceSamplingState seq(p, prompt, output);
  std::vector<float> x = {0.5f, 2.0f, -0.7f, -1.5f, 1.1f, 0.7f, -0.2f, 3.0f};
  const std::vector<float> raw = x;
  ApplyPenalties(seq, x);
  std::vector<float> want = raw;
  want[1] = raw[1] / 1.3f;                                // prompt only, positive
  want[3] = raw[3] * 1.3f - (0.4f * 1 + 0.25f);           // prompt + output, negative
  want[5] = raw[5] / 1.3f - (0.4f * 3 + 0.25f);           // output only
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(x[i], want[i]) << "token " << i;

  // Presence and frequency look at the output only, never the prompt.
  SamplingParams out_only;
  out_only.presence_penalty = 1.0f;
  out_only.frequency_penalty = -0.5f;
  SequenceSamplingState seq2(out_only, prompt, output);
  x = raw;
  ApplyPenalties(seq2, x);
  want = raw;
  want[3] = raw[3] - (-0.5f * 1 + 1.0f);
  want[5] = raw[5] - (-0.5f * 3 + 1.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(x[i], want[i]) << "token " << i;

  // Sample applies them and records its token: greedy moves off a token once generated.
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.presence_penalty = 2.0f;
  SequenceSamplingState seq3(greedy);
  const std::vector<float> close = {0.0f, 1.0f, 0.5f, 0.9f};
  EXPECT_EQ(Draws(seq3, close, 4), (std::vector<int32_t>{1, 3, 2, 0}));
  EXPECT_EQ(seq3.OutputCount(1), 1);
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t vocab = 1001;
  const std::vector<float> x = RandomLogits(rng, vocab, 3.0f);
  double m = *std::max_element(x.begin(), x.end()), z = 0;
  for (float v : x) z += std::exp(double(v) - m);
  auto logprob = [&](int32_t t) { return double(x[t]) - m - std::log(z); };
  std::vector<int32_t> order(vocab);
  for (int32_t i = 0; i < vocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });

  SamplingParams p;  // penalties and temperature must not change the log-probs
  p.logprobs = 5;
  p.temperature = 0.7f;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 1.0f;
  SequenceSamplingState seq(p, std::vector<int32_t>{order[0], order[1]},
                            std::vector<int32_t>{order[2]});
  SequenceSamplingState* seqs[] = {&seq};
  for (int step = 0; step < 10; ++step) {
    const SampledToken t = Sample(x, vocab, vocab, seqs)[0];
    EXPECT_NEAR(t.logprob, logprob(t.token), 1e-5);
    ASSERT_EQ(t.top.size(), 5u);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(t.top[i].first, order[i]);
      EXPECT_NEAR(t.top[i].second, logprob(order[i]), 1e-5);
    }
  }
  p.logprobs = 0;  // the chosen token only
  SequenceSamplingState only(p);
  seqs[0] = &only;
  const SampledToken t0 = Sample(x, vocab, vocab, seqs)[0];
  EXPECT_TRUE(t0.top.empty());
  EXPECT_NEAR(t0.logprob, logprob(t0.token), 1e-5);
}

TEST(Sampler, InvalidParamsNameTheField) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  struct Bad {
    const char* field;
    void (*set)(SamplingParams&);
  };
  const Bad bad[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = NAN; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = -1.0f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -3.0f; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -2; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},  // beyond kMaxLogprobs
  };
  for (const Bad& b : bad) {
    SamplingParams p;
    b.set(p);
    const absl::Status s = ValidateSamplingParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.field;
    EXPECT_NE(s.message().find(b.field), std::string::npos) << s.message();
  }
  SamplingParams edge;  // the edges of the accepted ranges
  edge.temperature = 0;
  edge.top_k = 0;
  edge.top_p = 1;
  edge.min_p = 1;
  edge.logprobs = 0;
  EXPECT_TRUE(ValidateSamplingParams(edge).ok());
  edge.logprobs = 20;  // kMaxLogprobs
  EXPECT_TRUE(ValidateSamplingParams(edge).ok());
}

// A prompt token scored against its row (prompt log-probs): log-softmax in
// double as by hand, its rank counts only strictly larger logits (a tie
// shares the better rank), the top n most likely first, ties to the lower id.
TEST(ScoreToken, LogprobRankAndTopAsByHand) {
  const std::vector<float> row = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  double z = 0;
  for (float x : row) z += std::exp(double{x});
  std::vector<int32_t> scratch;
  const ScoredToken s = ScoreToken(row, 4, 2, scratch);
  EXPECT_EQ(s.scored.token, 4);
  EXPECT_FLOAT_EQ(s.scored.logprob, static_cast<float>(0.5 - std::log(z)));
  EXPECT_EQ(s.rank, 4);
  ASSERT_EQ(s.scored.top.size(), 2u);
  EXPECT_EQ(s.scored.top[0].first, 1);
  EXPECT_EQ(s.scored.top[1].first, 3);
  EXPECT_FLOAT_EQ(s.scored.top[0].second, static_cast<float>(3.0 - std::log(z)));
  EXPECT_EQ(ScoreToken(row, 3, 0, scratch).rank, 1) << "tied with the best";
  EXPECT_TRUE(ScoreToken(row, 3, 0, scratch).scored.top.empty());
  EXPECT_EQ(ScoreToken(row, 2, 9, scratch).rank, 5);
  EXPECT_EQ(ScoreToken(row, 2, 9, scratch).scored.top.size(), 5u) << "n beyond the vocabulary: every token";
}

}  // namespace
}  // namespace tpserve
