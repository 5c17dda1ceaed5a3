// tpserve-bench's statistics on a synthetic timeline whose answers are worked
// out by hand below (vLLM benchmark_serving's definitions; tools/bench/serving_stats.h).
#include "tools/bench/serving_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench/report.h"
#include "tools/bench/workload.h"

namespace tpserve::bench {
namespace {

constexpr double kEps = 1e-9;

// A: sent at 0.0, chunks at +0.5, +0.7, +1.1, +1.6 (1 token each), prompt 10
// B: sent at 1.2, chunks at +0.3, +0.5, prompt 6
// C: sent at 1.5, one chunk at +0.4, prompt 4
// D: sent at 0.1, failed
// The run took 2.0 s.
std::vector<RequestRecord> Timeline() {
  RequestRecord a{.success = true, .start = 0.0, .ttft = 0.5, .latency = 1.6, .itl = {0.2, 0.4, 0.5},
                  .chunk_tokens = {1, 1, 1, 1}, .prompt_tokens = 10, .output_tokens = 4};
  RequestRecord b{.success = true, .start = 1.2, .ttft = 0.3, .latency = 0.5, .itl = {0.2},
                  .chunk_tokens = {1, 1}, .prompt_tokens = 6, .output_tokens = 2};
  RequestRecord c{.success = true, .start = 1.5, .ttft = 0.4, .latency = 0.4, .itl = {},
                  .chunk_tokens = {1}, .prompt_tokens = 4, .output_tokens = 1};
  RequestRecord d{.success = false, .error = "UNAVAILABLE: draining", .start = 0.1};
  return {a, b, c, d};
}

TEST(Percentile, InterpolatesLinearlyAsNumpyDoes) {
  EXPECT_DOUBLE_EQ(Percentile({3.0}, 99), 3.0);
  EXPECT_DOUBLE_EQ(Percentile({4.0, 1.0, 3.0, 2.0}, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile({4.0, 1.0, 3.0, 2.0}, 100), 4.0);
  EXPECT_DOUBLE_EQ(Percentile({4.0, 1.0, 3.0, 2.0}, 50), 2.5);   // rank 1.5
  EXPECT_NEAR(Percentile({10.0, 20.0, 30.0}, 90), 28.0, kEps);  // rank 1.8
}

TEST(ComputeMetrics, CountsAndThroughputs) {
  const ServingMetrics m = ComputeMetrics(Timeline(), 2.0, {50, 90, 99}, Slo{});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input_tokens, 20);
  EXPECT_EQ(m.total_output_tokens, 7);
  EXPECT_EQ(m.total_chunks, 7);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 13.5);
  EXPECT_EQ(m.good_requests, 3);  // no SLO: every successful request
  EXPECT_DOUBLE_EQ(m.request_goodput, 1.5);
}

TEST(ComputeMetrics, TtftTpotItlE2el) {
  const ServingMetrics m = ComputeMetrics(Timeline(), 2.0, {50, 90, 99}, Slo{});
  // TTFT 500, 300, 400 ms: mean 400, population std sqrt(20000/3), p90 at rank 1.8 = 480, p99 = 498.
  EXPECT_EQ(m.ttft.count, 3);
  EXPECT_NEAR(m.ttft.mean_ms, 400, kEps);
  EXPECT_NEAR(m.ttft.median_ms, 400, kEps);
  EXPECT_NEAR(m.ttft.std_ms, 81.64965809277261, 1e-6);
  ASSERT_EQ(m.ttft.percentiles_ms.size(), 3u);
  EXPECT_EQ(m.ttft.percentiles_ms[1].first, 90);
  EXPECT_NEAR(m.ttft.percentiles_ms[1].second, 480, 1e-6);
  EXPECT_NEAR(m.ttft.percentiles_ms[2].second, 498, 1e-6);
  // TPOT: A (1.6 - 0.5) / 3 = 366.67 ms, B (0.5 - 0.3) / 1 = 200 ms; C has one token: none.
  EXPECT_EQ(m.tpot.count, 2);
  EXPECT_NEAR(m.tpot.mean_ms, (1100.0 / 3 + 200) / 2, 1e-6);
  EXPECT_NEAR(m.tpot.median_ms, (1100.0 / 3 + 200) / 2, 1e-6);
  // ITL: 200, 400, 500 (A) and 200 (B): chunks - requests = 7 - 3 of them; mean 325,
  // median 300, p90 at rank 2.7 = 470, std sqrt(0.016875) s.
  EXPECT_EQ(m.itl.count, 4);
  EXPECT_NEAR(m.itl.mean_ms, 325, 1e-6);
  EXPECT_NEAR(m.itl.median_ms, 300, 1e-6);
  EXPECT_NEAR(m.itl.percentiles_ms[1].second, 470, 1e-6);
  EXPECT_NEAR(m.itl.std_ms, 129.9038105676658, 1e-6);
  // End-to-end: 1600, 500, 400 ms.
  EXPECT_EQ(m.e2el.count, 3);
  EXPECT_NEAR(m.e2el.mean_ms, 2500.0 / 3, 1e-6);
  EXPECT_NEAR(m.e2el.median_ms, 500, 1e-6);
}

TEST(ComputeMetrics, PeaksInOneSecondBuckets) {
  // Buckets from A's send: tokens at 0.5, 0.7 | 1.1, 1.6 (A), 1.5, 1.7 (B), 1.9 (C): 2 | 5.
  // Active: A in buckets 0-1, B and C in 1: 1 | 3.
  const ServingMetrics m = ComputeMetrics(Timeline(), 2.0, {50}, Slo{});
  EXPECT_DOUBLE_EQ(m.peak_output_throughput, 5);
  EXPECT_EQ(m.peak_concurrency, 3);
  // A chunk of 3 tokens counts 3.
  std::vector<RequestRecord> t = Timeline();
  t[2].chunk_tokens = {3};
  t[2].output_tokens = 3;
  EXPECT_DOUBLE_EQ(ComputeMetrics(t, 2.0, {50}, Slo{}).peak_output_throughput, 7);
}

TEST(ComputeMetrics, GoodputAgainstSlos) {
  auto good = [](const Slo& slo) { return ComputeMetrics(Timeline(), 2.0, {50}, slo).good_requests; };
  EXPECT_EQ(good(Slo{.ttft_ms = 450}), 2);                  // A's 500 ms misses
  EXPECT_EQ(good(Slo{.tpot_ms = 250}), 2);                  // A's 366.7 misses; C's one token is TPOT 0
  EXPECT_EQ(good(Slo{.ttft_ms = 350, .tpot_ms = 250}), 1);  // only B meets both
  EXPECT_EQ(good(Slo{.e2el_ms = 1000}), 2);                 // A's 1600 ms misses
  EXPECT_DOUBLE_EQ(ComputeMetrics(Timeline(), 2.0, {50}, Slo{.ttft_ms = 350, .tpot_ms = 250}).request_goodput, 0.5);
}

TEST(ComputeMetrics, NothingSucceededGivesZeros) {
  const ServingMetrics m = ComputeMetrics({RequestRecord{.error = "x"}}, 1.0, {99}, Slo{});
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.ttft.count, 0);
  EXPECT_EQ(m.ttft.percentiles_ms[0].second, 0);
  EXPECT_EQ(m.peak_concurrency, 0);
}

TEST(Parse, PercentilesAndSlo) {
  EXPECT_EQ(*ParsePercentiles("50,90,99"), (std::vector<double>{50, 90, 99}));
  EXPECT_EQ(*ParsePercentiles("99.9"), (std::vector<double>{99.9}));
  EXPECT_FALSE(ParsePercentiles("50,101").ok());
  EXPECT_FALSE(ParsePercentiles("p50").ok());
  absl::StatusOr<Slo> slo = ParseSlo("ttft:200,tpot:50");
  ASSERT_TRUE(slo.ok()) << slo.status();
  EXPECT_EQ(slo->ttft_ms, 200);
  EXPECT_EQ(slo->tpot_ms, 50);
  EXPECT_FALSE(slo->e2el_ms.has_value());
  EXPECT_FALSE(ParseSlo("").value().any());
  EXPECT_NE(ParseSlo("itl:5").status().message().find("--slo"), std::string::npos);
  EXPECT_FALSE(ParseSlo("ttft:-1").ok());
  EXPECT_FALSE(ParseSlo("ttft").ok());
}

// The prefix cache's share of the prompt tokens, over the successful requests.
TEST(ComputeMetrics, PrefixCacheHitRateIsCachedOverPromptTokens) {
  std::vector<RequestRecord> records = Timeline();
  records[0].cached_tokens = 8;  // of A's 10
  records[1].cached_tokens = 4;  // of B's 6; C none; D failed (its tokens not counted)
  records[3].cached_tokens = 100;
  const ServingMetrics m = ComputeMetrics(records, 2.0, {50}, Slo{});
  EXPECT_EQ(m.total_cached_tokens, 12);
  EXPECT_DOUBLE_EQ(m.prefix_cache_hit_rate, 12.0 / 20.0);
}

// Each conversation's turn t + 1 starts with its turn t (the resent history)
// plus t's output length of stand-in answer; every prompt starts with the
// shared prefix; turns come round by round.
TEST(MultiTurnPrompts, EachTurnResendsItsHistoryAfterTheSharedPrefix) {
  constexpr int64_t kConversations = 5, kTurns = 4, kPrefix = 37;
  const std::vector<BenchPrompt> p =
      MultiTurnPrompts(kConversations, kTurns, kPrefix, {3, 9}, {2, 6}, /*vocab_size=*/1000, /*seed=*/7);
  ASSERT_EQ(p.size(), static_cast<size_t>(kConversations * kTurns));
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(std::equal(p[0].token_ids.begin(), p[0].token_ids.begin() + kPrefix, p[i].token_ids.begin()))
        << "prompt " << i << " lacks the shared prefix";
    EXPECT_TRUE(p[i].output_len >= 2 && p[i].output_len <= 6);
    for (uint32_t t : p[i].token_ids) EXPECT_LT(t, 1000u);
    if (i < kConversations) {
      EXPECT_GE(p[i].token_ids.size(), static_cast<size_t>(kPrefix + 3));
      EXPECT_LE(p[i].token_ids.size(), static_cast<size_t>(kPrefix + 9));
      continue;
    }
    const BenchPrompt& prev = p[i - kConversations];  // the same conversation's previous turn
    const size_t grown = p[i].token_ids.size() - prev.token_ids.size();
    EXPECT_GE(grown, static_cast<size_t>(prev.output_len + 3)) << "prompt " << i;
    EXPECT_LE(grown, static_cast<size_t>(prev.output_len + 9)) << "prompt " << i;
    EXPECT_TRUE(std::equal(prev.token_ids.begin(), prev.token_ids.end(), p[i].token_ids.begin()))
        << "prompt " << i << " does not resend its history";
  }
  // Conversations differ right after the prefix (1000 ids: a tie of 3 tokens is rare, not impossible).
  EXPECT_NE(p[0].token_ids, p[1].token_ids);
  // Seeded: the same draw again.
  const std::vector<BenchPrompt> again =
      MultiTurnPrompts(kConversations, kTurns, kPrefix, {3, 9}, {2, 6}, 1000, 7);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(again[i].token_ids, p[i].token_ids);
}

// Speculative decoding from the counters before and after a run, vLLM's
// figures: 10 drafts of 40 tokens, 25 accepted (at positions 0..3: 9, 8, 5, 3).
TEST(ComputeSpecDecode, RatesFromTheCountersDifference) {
  const SpecDecodeCounts before{.drafts = 5, .draft_tokens = 20, .accepted_tokens = 7, .accepted_per_pos = {4, 2, 1}};
  const SpecDecodeCounts after{
      .drafts = 15, .draft_tokens = 60, .accepted_tokens = 32, .accepted_per_pos = {13, 10, 6, 3}};
  const std::optional<SpecDecodeMetrics> m = ComputeSpecDecode(before, after);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->drafts, 10);
  EXPECT_EQ(m->draft_tokens, 40);
  EXPECT_EQ(m->accepted_tokens, 25);
  EXPECT_NEAR(m->acceptance_rate, 25.0 / 40, kEps);
  EXPECT_NEAR(m->acceptance_length, 1 + 25.0 / 10, kEps);
  ASSERT_EQ(m->per_position.size(), 4u);  // a position the server first saw during the run starts at 0
  const std::vector<double> want = {0.9, 0.8, 0.5, 0.3};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(m->per_position[i], want[i], kEps);
  // No draft verified (speculation off), or counters that went back (a restarted server): nothing.
  EXPECT_FALSE(ComputeSpecDecode(after, after).has_value());
  EXPECT_FALSE(ComputeSpecDecode(after, SpecDecodeCounts{.drafts = 16}).has_value());
  // The table's section and the JSON, only with figures.
  RunReport run{.request_rate = 1};
  EXPECT_EQ(FormatTable(run, true).find("Speculative Decoding"), std::string::npos);
  EXPECT_TRUE(RunToJson(run)["spec_decode"].is_null());
  run.metrics.spec_decode = m;
  const std::string table = FormatTable(run, true);
  for (const char* line : {"Acceptance rate (%):                     62.50", "Acceptance length:                       3.50",
                           "Per-position acceptance (%):             90.00, 80.00, 50.00, 30.00"}) {
    EXPECT_NE(table.find(line), std::string::npos) << line << " in\n" << table;
  }
  EXPECT_DOUBLE_EQ(RunToJson(run)["spec_decode"]["acceptance_length"].get<double>(), 3.5);
}

}  // namespace
}  // namespace tpserve::bench
