// The row algorithm of the GPU sampler (sampling/sampling_row.h), run on the host
// as a one-thread block, against the host sampler tpserve::Sample on the same
// logits and the same uniforms: greedy, temperature, each filter alone and
// combined, penalties, ties (bf16-rounded logits), log-probs, and the
// tensor-parallel [tp, S, Vs] layout with padding.
//
// Tokens must be equal, except where the uniform lies within kUniformSlack of a
// boundary of the cumulative distribution: the row algorithm sums fp32 weights
// in fp64 while the host sampler computes fp64 weights, so there the two may
// land on neighbouring tokens. The test checks that rule (the row algorithm
// at u ± kUniformSlack gives the host's token) and that it is rare.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/sampling_inputs.h"
#include "sampling/sampling_row.h"
#include "model/dtype.h"
#include "sampling/sampler.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

using sampling::PenaltyEntry;
using sampling::RowParams;
using sampling::RowResult;
using sampling::TopLogprob;

constexpr double kUniformSlack = 1e-6;
constexpr float kLogprobTol = 1e-5f;

// [tp, S, Vs] with Vs = ceil(V / tp); the padding holds a huge value that
// would win every argmax and wreck every sum if it were ever read.
struct Gathered {
  int tp, rows, shard_vocab, vocab;
  std::vector<float> data;  // [tp, S, Vs]

  float& at(int s, int i) {
    return data[(static_cast<size_t>(i / shard_vocab) * rows + s) * shard_vocab + i % shard_vocab];
  }
  // Row s as the host sampler wants it: [V], the shards concatenated.
  std::vector<float> Row(int s) {
    std::vector<float> row(vocab);
    for (int i = 0; i < vocab; ++i) row[i] = at(s, i);
    return row;
  }
};

Gathered RandomGathered(std::mt19937_64& rng, int tp, int rows, int vocab, float stddev,
                        bool bf16) {
  Gathered g{tp, rows, (vocab + tp - 1) / tp, vocab, {}};
  g.data.assign(static_cast<size_t>(tp) * rows * g.shard_vocab, 1e30f);
  std::normal_distribution<float> normal(0.0f, stddev);
  for (int s = 0; s < rows; ++s) {
    for (int i = 0; i < vocab; ++i) {
      const float x = normal(rng);
      g.at(s, i) = bf16 ? Bf16ToFloat(FloatToBf16(x)) : x;
    }
  }
  return g;
}

struct RowOut {
  RowResult result;
  std::vector<TopLogprob> top;
};

RowOut RunRow(Gathered& g, int s, const RowParams& p, const std::vector<PenaltyEntry>& entries) {
  sampling::SerialBlock block;
  sampling::GatheredRow<float> row{g.data.data() + static_cast<size_t>(s) * g.shard_vocab,
                                   static_cast<int64_t>(g.rows) * g.shard_vocab, g.shard_vocab,
                                   g.vocab};
  std::vector<uint32_t> seen((g.vocab + 31) / 32, 0xdeadbeefu);  // garbage: must be cleared
  int32_t counter = -7;
  RowOut out;
  out.top.assign(std::max(p.num_logprobs, 0) + 1, TopLogprob{-1, 0});
  sampling::RowSampler<sampling::SerialBlock, float> sampler(
      block, row, entries.data(), static_cast<int32_t>(entries.size()), p,
      sampling::RowScratch{seen.data(), &counter});
  out.result = sampler.Run(out.top.data());
  out.top.resize(out.result.num_top);
  return out;
}

struct Case {
  std::string name;
  SamplingParams params;
  bool bf16 = false;     // bf16-rounded logits: many exact ties
  float stddev = 2.0f;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& set, bool bf16 = false, float stddev = 2.0f) {
    Case c{std::move(name), {}, bf16, stddev};
    set(c.params);
    cases.push_back(c);
  };
  add("greedy", [](SamplingParams& p) { p.temperature = 0; });
  add("greedy_bf16_ties", [](SamplingParams& p) { p.temperature = 0; }, true, 0.3f);
  add("temperature", [](SamplingParams& p) { p.temperature = 0.7f; });
  add("hot", [](SamplingParams& p) { p.temperature = 3.0f; });
  add("min_p", [](SamplingParams& p) { p.min_p = 0.1f; });
  add("top_k", [](SamplingParams& p) { p.top_k = 5; });
  add("top_k_1", [](SamplingParams& p) { p.top_k = 1; });
  add("top_k_huge", [](SamplingParams& p) { p.top_k = 1 << 20; });
  add("top_p", [](SamplingParams& p) { p.top_p = 0.8f; });
  add("top_p_tiny", [](SamplingParams& p) { p.top_p = 1e-6f; });
  add("combined", [](SamplingParams& p) {
    p.temperature = 0.9f;
    p.min_p = 0.02f;
    p.top_k = 20;
    p.top_p = 0.9f;
  });
  add("combined_bf16_ties", [](SamplingParams& p) {
    p.temperature = 0.8f;
    p.min_p = 0.01f;
    p.top_k = 13;
    p.top_p = 0.7f;
  }, true, 0.25f);
  add("top_k_bf16_ties", [](SamplingParams& p) { p.top_k = 7; }, true, 0.1f);
  add("top_p_bf16_ties", [](SamplingParams& p) { p.top_p = 0.5f; }, true, 0.1f);
  add("repetition", [](SamplingParams& p) { p.repetition_penalty = 1.3f; });
  add("frequency_presence", [](SamplingParams& p) {
    p.frequency_penalty = 0.5f;
    p.presence_penalty = -0.4f;
  });
  add("all_penalties_greedy", [](SamplingParams& p) {
    p.temperature = 0;
    p.repetition_penalty = 0.8f;
    p.frequency_penalty = -1.5f;
    p.presence_penalty = 2.0f;
  });
  add("penalties_and_filters", [](SamplingParams& p) {
    p.repetition_penalty = 1.7f;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.3f;
    p.top_k = 9;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
  }, true, 1.0f);
  // Token-level controls (entries with a bias; allowed_token_ids as the candidate list).
  auto controls = [](TokenControls c) {
    NormalizeTokenControls(c);
    return std::make_shared<const TokenControls>(std::move(c));
  };
  add("logit_bias", [&](SamplingParams& p) {
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.controls = controls({.logit_bias = {{0, 2.0f}, {1, -100.0f}, {2, 5.0f}, {5, -1.5f}, {17, 3.0f},
                                          {100, -2.0f}, {1000, 4.0f}}});
  });
  add("logit_bias_penalties_greedy", [&](SamplingParams& p) {
    p.temperature = 0;
    p.repetition_penalty = 1.4f;
    p.frequency_penalty = 0.7f;
    p.controls = controls({.logit_bias = {{0, 1.0f}, {3, 2.5f}, {6, -0.5f}, {50, 3.0f}, {4000, 6.0f}}});
  });
  const std::vector<int32_t> allowed = {0, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597, 2584, 4096};
  add("allowed", [&](SamplingParams& p) {
    p.temperature = 1.2f;
    p.top_k = 5;
    p.repetition_penalty = 1.2f;
    p.logprobs = 3;
    p.controls = controls({.logit_bias = {{3, 1.0f}, {4, 9.0f}}, .allowed_token_ids = allowed});
  });
  add("allowed_greedy_bf16_ties", [&](SamplingParams& p) {
    p.temperature = 0;
    p.controls = controls({.allowed_token_ids = allowed});
  }, true, 0.1f);
  add("allowed_top_p_min_p", [&](SamplingParams& p) {
    p.top_p = 0.7f;
    p.min_p = 0.05f;
    p.controls = controls({.allowed_token_ids = allowed, .bad_words = {{13}, {2, 3}}});
  });
  add("bad_words", [&](SamplingParams& p) {
    p.temperature = 1.5f;
    p.controls = controls({.bad_words = {{1}, {0, 2}, {4, 5, 6}}});
  }, false, 0.5f);
  add("logprobs_0", [](SamplingParams& p) { p.logprobs = 0; });
  add("logprobs_5_ties", [](SamplingParams& p) {
    p.logprobs = 5;
    p.top_k = 3;
  }, true, 0.1f);
  add("logprobs_more_than_vocab", [](SamplingParams& p) {
    p.logprobs = 20;
    p.temperature = 0;
  });
  return cases;
}

// Runs `steps` steps of S sequences with `c`'s parameters through both
// samplers and compares. Returns how many tokens fell under the boundary rule.
int CompareCase(const Case& c, int tp, int rows, int vocab, uint64_t seed, int steps) {
  SCOPED_TRACE("case=" + c.name + " tp=" + std::to_string(tp) + " S=" + std::to_string(rows) +
               " V=" + std::to_string(vocab) + " seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Each sequence twice with the same seed and history: `ref` goes through
  // tpserve::Sample, `twin` gives the uniforms and penalty entries.
  std::vector<std::unique_ptr<SequenceSamplingState>> ref, twin;
  std::uniform_int_distribution<int32_t> any_token(0, vocab - 1);
  for (int s = 0; s < rows; ++s) {
    SamplingParams p = c.params;
    p.seed = rng();
    std::vector<int32_t> prompt(7), output(5);
    for (int32_t& t : prompt) t = any_token(rng);
    for (int32_t& t : output) t = any_token(rng);
    prompt.push_back(vocab + 3);  // out of the vocabulary: ignored by both
    ref.push_back(std::make_unique<SequenceSamplingState>(p, prompt, output));
    twin.push_back(std::make_unique<SequenceSamplingState>(p, prompt, output));
  }
  int boundary = 0;
  for (int step = 0; step < steps; ++step) {
    Gathered g = RandomGathered(rng, tp, rows, vocab, c.stddev, c.bf16);
    std::vector<float> flat;  // [S, V] for the host sampler
    for (int s = 0; s < rows; ++s) {
      const std::vector<float> row = g.Row(s);
      flat.insert(flat.end(), row.begin(), row.end());
    }
    std::vector<SequenceSamplingState*> ptrs;
    for (auto& r : ref) ptrs.push_back(r.get());
    const std::vector<SampledToken> want = Sample(flat, vocab, vocab, ptrs);
    for (int s = 0; s < rows; ++s) {
      SCOPED_TRACE("step=" + std::to_string(step) + " row=" + std::to_string(s));
      std::vector<PenaltyEntry> entries;
      const sampling::RowEntries row_entries = sampling::AppendRowEntries(*twin[s], vocab, entries);
      const double u = twin[s]->NextUniform();
      RowParams p = sampling::MakeRowParams(twin[s]->params(), u);
      p.allowed_only = row_entries.allowed_only ? 1 : 0;
      const RowOut got = RunRow(g, s, p, entries);
      if (got.result.token != want[s].token) {
        RowParams lower = p, upper = p;
        lower.uniform = std::max(0.0, u - kUniformSlack);
        upper.uniform = std::min(1.0, u + kUniformSlack);
        const int32_t at_lower = RunRow(g, s, lower, entries).result.token;
        const int32_t at_upper = RunRow(g, s, upper, entries).result.token;
        EXPECT_TRUE(at_lower == want[s].token || at_upper == want[s].token)
            << "row algorithm chose " << got.result.token << ", host sampler " << want[s].token
            << " at u=" << u << " (and not within " << kUniformSlack << " of a boundary: "
            << at_lower << " / " << at_upper << ")";
        ++boundary;
      }
      if (c.params.logprobs >= 0) {
        EXPECT_NEAR(got.result.logprob, want[s].logprob, kLogprobTol);
        EXPECT_EQ(got.top.size(), want[s].top.size());
        for (size_t k = 0; k < std::min(got.top.size(), want[s].top.size()); ++k) {
          EXPECT_EQ(got.top[k].token, want[s].top[k].first) << "top " << k;
          EXPECT_NEAR(got.top[k].logprob, want[s].top[k].second, kLogprobTol) << "top " << k;
        }
      } else {
        EXPECT_EQ(got.result.num_top, 0);
      }
      twin[s]->AppendOutput(want[s].token);
    }
  }
  return boundary;
}

using testing_util::TestSeed;

TEST(SamplingRow, MatchesHostSamplerOnOddVocabSizes) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  int boundary = 0, total = 0;
  for (const Case& c : Cases()) {
    for (int vocab : {1, 3, 7, 19, 111, 4097}) {
      const int steps = 3, rows = 3;
      boundary += CompareCase(c, /*tp=*/1, rows, vocab, seed + vocab, steps);
      total += steps * rows;
    }
  }
  EXPECT_LE(boundary, total / 100) << "boundary cases should be rare";
}

TEST(SamplingRow, TensorParallelLayoutWithPadding) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (const Case& c : Cases()) {
    for (int vocab : {7, 19, 4097}) {  // Vs = ceil(V / 3) leaves 2, 2 and 1 padding columns
      CompareCase(c, /*tp=*/3, /*rows=*/4, vocab, seed ^ (vocab * 31), /*steps=*/2);
    }
  }
}

// A row's entries: penalties merged with the bias and the bans, one per
// token, sorted, tokens past the vocabulary dropped; with allowed_token_ids
// exactly the allowed tokens, carrying their penalties and biases.
TEST(SamplingRow, RowEntriesMergePenaltiesBiasBansAndAllowedTokens) {
  const float inf = std::numeric_limits<float>::infinity();
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  TokenControls c{.logit_bias = {{2, 1.5f}, {6, -2.0f}, {40, 3.0f}}, .bad_words = {{9}, {4, 6}}};
  p.controls = std::make_shared<const TokenControls>(c);
  SequenceSamplingState seq(p, {}, std::vector<int32_t>{6, 4, 6, 4});  // output ends with 4: "4 6" bans 6
  std::vector<PenaltyEntry> entries;
  sampling::RowEntries got = sampling::AppendRowEntries(seq, 30, entries);
  auto as_tuples = [](const std::vector<PenaltyEntry>& v) {
    std::vector<std::tuple<int32_t, int32_t, float>> t;
    for (const PenaltyEntry& e : v) t.emplace_back(e.token, e.output_count, e.bias);
    return t;
  };
  EXPECT_FALSE(got.allowed_only);
  EXPECT_EQ(as_tuples(entries), (std::vector<std::tuple<int32_t, int32_t, float>>{
                                    {2, 0, 1.5f}, {4, 2, 0.0f}, {6, 2, -inf}, {9, 0, -inf}}));
  c.allowed_token_ids = {1, 4, 9, 12, 35};
  p.controls = std::make_shared<const TokenControls>(c);
  SequenceSamplingState allowed(p, {}, std::vector<int32_t>{6, 4, 6, 4});
  entries.assign(1, PenaltyEntry{99, 0, 0});  // a previous row's: kept as they are
  got = sampling::AppendRowEntries(allowed, 30, entries);
  EXPECT_TRUE(got.allowed_only);
  EXPECT_EQ(got.count, 4);
  EXPECT_EQ(as_tuples(entries), (std::vector<std::tuple<int32_t, int32_t, float>>{
                                    {99, 0, 0.0f}, {1, 0, 0.0f}, {4, 2, 0.0f}, {9, 0, -inf}, {12, 0, 0.0f}}));
}

// A token of weight 0 (a ban or a grammar mask writes -inf) is never drawn,
// even when rounding puts u · total at the very end of the row and the draw
// falls back to the last kept token: the last one with weight. (u = 1, outside
// the uniform's [0, 1), stands for that rounding: the cumulative weight never
// exceeds the target. Before the fix it drew id 8, whose logit is -inf.)
TEST(SamplingRow, ATokenOfWeightZeroIsNeverTheFallback) {
  const float inf = std::numeric_limits<float>::infinity();
  Gathered g{1, 1, 9, 9, {0.3f, 1.1f, -0.7f, 0.2f, 2.0f, 0.9f, 1.4f, -inf, -inf}};
  for (double u : {0.0, 0.5, 0.999999, 1.0}) {
    RowParams p;
    p.uniform = u;
    const int32_t token = RunRow(g, 0, p, {}).result.token;
    EXPECT_LT(token, 7) << "u = " << u;
    if (u > 0.99) {
      EXPECT_EQ(token, 6) << "u = " << u;
    }
  }
}

// The documented tie rules on a hand-made row: every filter breaks ties in
// value towards the lower id, and at least one token survives.
TEST(SamplingRow, TiesBreakToTheLowerId) {
  Gathered g{1, 1, 9, 9, {1.0f, 3.0f, 3.0f, -2.0f, 3.0f, 0.5f, 3.0f, 3.0f, 1.0f}};
  auto token = [&](RowParams p) { return RunRow(g, 0, p, {}).result.token; };
  RowParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(token(greedy), 1);
  // top_k = 2 keeps ids 1 and 2 of the five 3.0s: u below 1/2 picks 1, above picks 2.
  RowParams top2;
  top2.top_k = 2;
  top2.uniform = 0.49;
  EXPECT_EQ(token(top2), 1);
  top2.uniform = 0.51;
  EXPECT_EQ(token(top2), 2);
  top2.uniform = 0.999999;
  EXPECT_EQ(token(top2), 2);
  // top_p tiny keeps exactly the first of the tie group.
  RowParams nucleus;
  nucleus.top_p = 1e-6f;
  nucleus.uniform = 0.999;
  EXPECT_EQ(token(nucleus), 1);
  // min_p = 1 keeps exactly the five tied maxima.
  RowParams minp;
  minp.min_p = 1.0f;
  minp.uniform = 0.999;
  EXPECT_EQ(token(minp), 7);
  minp.uniform = 0.0;
  EXPECT_EQ(token(minp), 1);
  // Top-3 log-probs: the three lowest ids among the 3.0s, equal log-probs.
  RowParams lp;
  lp.temperature = 0;
  lp.num_logprobs = 3;
  const RowOut out = RunRow(g, 0, lp, {});
  ASSERT_EQ(out.top.size(), 3u);
  EXPECT_EQ(out.top[0].token, 1);
  EXPECT_EQ(out.top[1].token, 2);
  EXPECT_EQ(out.top[2].token, 4);
  EXPECT_EQ(out.top[0].logprob, out.top[2].logprob);
}

// Penalty entries: sorted by token, prompt tokens only with a repetition penalty.
TEST(SamplingRow, PenaltyEntriesFollowTheState) {
  SamplingParams p;
  p.repetition_penalty = 1.2f;
  const std::vector<int32_t> prompt = {9, 4, 9, 2}, output = {4, 11, 11};
  SequenceSamplingState seq(p, prompt, output);
  std::vector<PenaltyEntry> entries;
  EXPECT_EQ(sampling::AppendPenaltyEntries(seq, entries), 4);
  ASSERT_EQ(entries.size(), 4u);
  const int32_t want[][3] = {{2, 0, 1}, {4, 1, 1}, {9, 0, 1}, {11, 2, 0}};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(entries[k].token, want[k][0]);
    EXPECT_EQ(entries[k].output_count, want[k][1]);
    EXPECT_EQ(entries[k].in_prompt, want[k][2]);
  }
  SamplingParams off;
  SequenceSamplingState quiet(off, prompt, output);
  EXPECT_EQ(sampling::AppendPenaltyEntries(quiet, entries), 0);
  SamplingParams freq;
  freq.frequency_penalty = 0.1f;
  SequenceSamplingState outputs_only(freq, prompt, output);
  entries.clear();
  EXPECT_EQ(sampling::AppendPenaltyEntries(outputs_only, entries), 2);  // 4 and 11
}

}  // namespace
}  // namespace tpserve
