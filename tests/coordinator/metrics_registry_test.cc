// The metrics registry's Prometheus text, checked line by line, and its
// updates from many threads at once (coordinator/metrics_registry.h).
#include "coordinator/metrics_registry.h"

#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "coordinator/coordinator_metrics.h"

namespace tpserve {
namespace {

TEST(MetricsRegistry, RendersCountersGaugesAndHistograms) {
  MetricsRegistry r;
  r.Counter("t:requests_total", "Requests.", {{"reason", "stop"}}).Increment(3);
  r.Counter("t:requests_total", "Requests.", {{"reason", "length"}}).Increment();
  r.Gauge("t:running", "Running now.").Set(0.25);
  MetricHistogram& h = r.Histogram("t:latency_seconds", "Latency.", {0.5, 1, 2.5});
  for (double v : {0.1, 0.5, 0.7, 3.0}) h.Observe(v);  // 0.5 is in the le="0.5" bucket
  EXPECT_EQ(r.Render(),
            "# HELP t:latency_seconds Latency.\n"
            "# TYPE t:latency_seconds histogram\n"
            "t:latency_seconds_bucket{le=\"0.5\"} 2\n"
            "t:latency_seconds_bucket{le=\"1\"} 3\n"
            "t:latency_seconds_bucket{le=\"2.5\"} 3\n"
            "t:latency_seconds_bucket{le=\"+Inf\"} 4\n"
            "t:latency_seconds_sum 4.3\n"
            "t:latency_seconds_count 4\n"
            "# HELP t:requests_total Requests.\n"
            "# TYPE t:requests_total counter\n"
            "t:requests_total{reason=\"length\"} 1\n"
            "t:requests_total{reason=\"stop\"} 3\n"
            "# HELP t:running Running now.\n"
            "# TYPE t:running gauge\n"
            "t:running 0.25\n");
}

TEST(MetricsRegistry, SameNameAndLabelsIsTheSameMetric) {
  MetricsRegistry r;
  MetricCounter& a = r.Counter("c_total", "C.", {{"k", "v"}});
  EXPECT_EQ(&a, &r.Counter("c_total", "C.", {{"k", "v"}}));
  EXPECT_NE(&a, &r.Counter("c_total", "C.", {{"k", "w"}}));
}

TEST(MetricsRegistry, EscapesLabelValues) {
  MetricsRegistry r;
  r.Gauge("g", "G.", {{"path", "a\"b\\c\nd"}}).Set(1);
  EXPECT_NE(r.Render().find("g{path=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << r.Render();
}

TEST(MetricsRegistry, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry r;
  MetricCounter& c = r.Counter("c_total", "C.");
  MetricHistogram& h = r.Histogram("h", "H.", {1, 2});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(i % 3);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
  const MetricHistogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative.back(), 40000u);
  EXPECT_EQ(s.cumulative[0], 26668u);  // values 0 and 1: i % 3 != 2, 6667 + 6667 of 10000, times 4
}

// As the coordinator calls it: the engine thread publishes its state while
// four output threads record tokens and finished requests, and /metrics
// renders meanwhile. Every figure is counted exactly once.
TEST(CoordinatorMetrics, TheEngineAndTheOutputThreadsRecordAtOnce) {
  CoordinatorMetrics m(/*max_model_len=*/4096, /*tp=*/1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < 5000; ++i) {
        if (i % 100 == 0) {
          m.OnFirstToken(7);
        } else {
          m.OnNextToken(0.002);
        }
        if (i % 100 == 99) {
          m.OnRequestFinished(i % 200 == 99 ? "stop" : "abort",
                              {.first_scheduled = 0.01, .first_token = 0.02, .end = 0.5, .has_token = true}, 7, 100);
        }
      }
    });
  }
  threads.emplace_back([&m] {
    for (int i = 1; i <= 5000; ++i) {
      m.OnEngineState(0, {.running = 3, .waiting = 1, .kv_blocks_used = 4, .kv_blocks_total = 8,
                          .preemptions_total = i, .prefix_query_tokens_total = 16 * i, .prefix_hit_tokens_total = 8 * i});
    }
  });
  threads.emplace_back([&m] {
    for (int i = 0; i < 50; ++i) EXPECT_FALSE(m.registry().Render().empty());
  });
  for (std::thread& t : threads) t.join();
  const CoordinatorMetrics::Totals t = m.totals();
  EXPECT_EQ(t.generation_tokens, 20000u);
  EXPECT_EQ(t.prompt_tokens, 4u * 50 * 7);
  EXPECT_EQ(t.requests_finished.at("stop"), 100u);
  EXPECT_EQ(t.requests_finished.at("abort"), 100u);
  EXPECT_EQ(t.preemptions, 5000u);
  EXPECT_EQ(t.prefix_cache_queries, 80000u);
  std::map<std::string, uint64_t> count;
  for (const auto& x : t.histograms) count[x.name] = x.count;
  EXPECT_EQ(count.at("inter_token_latency_seconds"), 4u * 4950);
  EXPECT_EQ(count.at("e2e_request_latency_seconds"), 200u);
}

TEST(Buckets125, AsVllmBuildsThem) {
  EXPECT_EQ(Buckets125(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(Buckets125(2048), (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}));
}

TEST(CoordinatorMetrics, RecordsARequestsPhasesAndTotals) {
  CoordinatorMetrics m(/*max_model_len=*/128, /*tp=*/2);
  m.OnFirstToken(10);
  m.OnNextToken(0.02);
  m.OnRequestFinished("length", {.first_scheduled = 0.1, .first_token = 0.4, .end = 0.5, .has_token = true}, 10, 2);
  m.OnRequestFailed();
  using State = CoordinatorMetrics::EngineState;
  m.OnEngineState(0, State{.kv_blocks_used = 4, .kv_blocks_total = 8, .preemptions_total = 3,
                           .prefix_query_tokens_total = 64, .prefix_hit_tokens_total = 32});
  const State again{.kv_blocks_total = 8, .preemptions_total = 3, .prefix_query_tokens_total = 64,
                    .prefix_hit_tokens_total = 32};
  m.OnEngineState(0, again);  // the totals again: counted once
  const State rebuilt{.kv_blocks_total = 8, .preemptions_total = 1, .prefix_query_tokens_total = 16};
  m.OnEngineState(0, rebuilt);  // a rebuilt engine starts again from 0
  m.OnEngineState(0, rebuilt);
  const CoordinatorMetrics::Totals t = m.totals();
  EXPECT_EQ(t.requests_finished.at("length"), 1u);
  EXPECT_EQ(t.requests_finished.at("stop"), 0u);
  EXPECT_EQ(t.requests_failed, 1u);
  EXPECT_EQ(t.prompt_tokens, 10u);
  EXPECT_EQ(t.generation_tokens, 2u);
  EXPECT_EQ(t.preemptions, 4u);
  EXPECT_EQ(t.prefix_cache_queries, 80u);
  EXPECT_EQ(t.prefix_cache_hits, 32u);
  EXPECT_EQ(t.kv_cache_usage, 0.0);
  std::map<std::string, std::pair<uint64_t, double>> h;  // name -> (count, sum)
  for (const auto& x : t.histograms) h[x.name] = {x.count, x.sum};
  EXPECT_NEAR(h.at("request_prefill_time_seconds").second, 0.3, 1e-12);
  EXPECT_NEAR(h.at("request_decode_time_seconds").second, 0.1, 1e-12);
  EXPECT_NEAR(h.at("request_queue_time_seconds").second, 0.1, 1e-12);
  EXPECT_EQ(h.at("inter_token_latency_seconds").first, 1u);
  EXPECT_EQ(h.at("e2e_request_latency_seconds").first, 1u);
  EXPECT_EQ(h.at("step_duration_seconds").first, 0u);
  m.OnWorkerStep(1, 0.003);
  m.OnWorkerStep(7, 1.0);  // no such rank: ignored
  for (const auto& x : m.totals().histograms) h[x.name] = {x.count, x.sum};
  EXPECT_EQ(h.at("worker_step_compute_seconds{rank=\"0\"}").first, 0u);
  EXPECT_EQ(h.at("worker_step_compute_seconds{rank=\"1\"}").first, 1u);
  const std::string text = m.registry().Render();
  EXPECT_NE(text.find("tpserve:worker_up{rank=\"1\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("tpserve:request_success_total{finished_reason=\"length\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tpserve:time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("tpserve:request_prompt_tokens_bucket{le=\"100\"} 1\n"), std::string::npos);
}

// Speculative decoding's counters as vLLM's: one draft per verified proposal,
// its tokens, the accepted ones, and per position how often it was accepted.
TEST(CoordinatorMetrics, SpecDecodeCountersFollowVllm) {
  CoordinatorMetrics m(/*max_model_len=*/128, /*tp=*/1);
  m.OnSpeculation(4, 2, /*pipelined=*/true);
  m.OnSpeculation(3, 3);
  m.OnSpeculation(0, 0, /*pipelined=*/true);  // no proposal: no draft
  const CoordinatorMetrics::Totals t = m.totals();
  EXPECT_EQ(t.spec_drafts, 2u);
  EXPECT_EQ(t.spec_draft_tokens, 7u);
  EXPECT_EQ(t.spec_accepted_tokens, 5u);
  EXPECT_EQ(t.spec_pipelined_drafts, 1u);
  // Positions of the longest draft (4): accepted at 0 by both, at 1 by both, at 2 by the second.
  EXPECT_EQ(t.spec_accepted_per_pos, (std::vector<uint64_t>{2, 2, 1, 0}));
  const std::string text = m.registry().Render();
  for (const char* line : {"tpserve:spec_decode_num_drafts 2\n", "tpserve:spec_decode_num_draft_tokens 7\n",
                           "tpserve:spec_decode_num_accepted_tokens 5\n",
                           "tpserve:spec_decode_num_pipelined_drafts 1\n",
                           "tpserve:spec_decode_num_accepted_tokens_per_pos{position=\"0\"} 2\n",
                           "tpserve:spec_decode_num_accepted_tokens_per_pos{position=\"1\"} 2\n",
                           "tpserve:spec_decode_num_accepted_tokens_per_pos{position=\"2\"} 1\n",
                           "tpserve:spec_decode_num_accepted_tokens_per_pos{position=\"3\"} 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
}

// Each data-parallel group's gauges carry its dp_rank; the counters add every
// group's totals, each followed on its own; kv_cache_usage is over all blocks.
TEST(CoordinatorMetrics, GroupGaugesByDpRank) {
  CoordinatorMetrics m(/*max_model_len=*/128, /*tp=*/1, /*dp=*/2);
  m.OnEngineState(0, {.running = 3, .waiting = 2, .kv_blocks_used = 6, .kv_blocks_total = 8,
                      .tokens_in_flight = 77, .preemptions_total = 2, .prefix_query_tokens_total = 48});
  m.OnEngineState(1, {.running = 1, .kv_blocks_used = 1, .kv_blocks_total = 8, .tokens_in_flight = 5,
                      .preemptions_total = 5, .prefix_query_tokens_total = 16});
  m.OnEngineState(1, {.running = 1, .kv_blocks_used = 2, .kv_blocks_total = 8, .tokens_in_flight = 6,
                      .preemptions_total = 5, .prefix_query_tokens_total = 16});  // group 1's totals again
  m.OnEngineState(2, {.running = 100, .preemptions_total = 100});                 // no such group: ignored
  const std::string text = m.registry().Render();
  for (const char* line : {"tpserve:num_requests_running{dp_rank=\"0\"} 3\n",
                           "tpserve:num_requests_running{dp_rank=\"1\"} 1\n",
                           "tpserve:num_requests_waiting{dp_rank=\"0\"} 2\n",
                           "tpserve:kv_cache_usage_perc{dp_rank=\"0\"} 0.75\n",
                           "tpserve:kv_cache_usage_perc{dp_rank=\"1\"} 0.25\n",
                           "tpserve:kv_cache_blocks_used{dp_rank=\"1\"} 2\n",
                           "tpserve:kv_cache_blocks_total{dp_rank=\"1\"} 8\n",
                           "tpserve:num_tokens_in_flight{dp_rank=\"0\"} 77\n",
                           "tpserve:num_tokens_in_flight{dp_rank=\"1\"} 6\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
  }
  EXPECT_EQ(text.find("dp_rank=\"2\""), std::string::npos);
  const CoordinatorMetrics::Totals t = m.totals();
  EXPECT_EQ(t.preemptions, 7u);
  EXPECT_EQ(t.prefix_cache_queries, 64u);
  EXPECT_EQ(t.kv_cache_usage, 0.5);  // (6 + 2) / (8 + 8), exact in binary
}

}  // namespace
}  // namespace tpserve
