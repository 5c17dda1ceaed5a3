// tpserve-bench against a CPU deployment (tp 1, the tiny model) while /metrics
// is scraped: the benchmark's JSON is complete and consistent, and the
// scrapes parse with Prometheus's own text parser, with counters that only
// grow, gauges back at idle and histograms that counted every request
// (tests/e2e/check_metrics.py). Also the liveness and readiness health names.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

constexpr int kPrompts = 16;

// The port of "tpserve-coordinator: metrics on http://127.0.0.1:PORT/metrics" in its log.
int MetricsPort(const std::string& log) {
  const std::string marker = "metrics on http://127.0.0.1:";
  const size_t at = log.find(marker);
  if (at == std::string::npos) return 0;
  int port = 0;
  const size_t from = at + marker.size();
  return absl::SimpleAtoi(log.substr(from, log.find('/', from) - from), &port) ? port : 0;
}

std::string Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result result = client.Get("/metrics");
  if (!result || result->status != 200) {
    ADD_FAILURE() << "GET /metrics failed";
    return "";
  }
  EXPECT_NE(result->get_header_value("Content-Type").find("text/plain; version=0.0.4"), std::string::npos);
  return result->body;
}

void Expect(bool ok, const std::string& what, const nlohmann::json& j) { EXPECT_TRUE(ok) << what << " in " << j.dump(2); }

// Every figure there, counts that add up, latencies positive and ordered by percentile.
void CheckBenchJson(const nlohmann::json& doc) {
  ASSERT_TRUE(doc.contains("configuration") && doc.contains("runs")) << doc.dump(2);
  EXPECT_EQ(doc["configuration"]["mode"], "serve");
  EXPECT_EQ(doc["configuration"]["num_prompts"], std::to_string(kPrompts));
  ASSERT_EQ(doc["runs"].size(), 1u);
  const nlohmann::json& run = doc["runs"][0];
  EXPECT_EQ(run["completed"].get<int>() + run["failed"].get<int>(), kPrompts) << run.dump(2);
  EXPECT_EQ(run["failed"], 0) << run.dump(2);
  EXPECT_EQ(run["request_rate"], 8.0);
  const int64_t completed = run["completed"], chunks = run["total_chunks"], out = run["total_output_tokens"];
  Expect(out >= 2 * completed && out <= 12 * completed, "output tokens within --output-len", run);
  Expect(run["total_input_tokens"] >= 4 * completed && run["total_input_tokens"] <= 24 * completed,
         "input tokens within --input-len", run);
  Expect(chunks >= completed && chunks <= out, "chunks between requests and tokens", run);
  EXPECT_EQ(run["ttft"]["count"], completed);
  EXPECT_EQ(run["e2el"]["count"], completed);
  EXPECT_EQ(run["itl"]["count"], chunks - completed) << "ITL count = chunks - requests";
  Expect(run["duration_s"] > 0 && run["request_throughput"] > 0 && run["output_throughput"] > 0, "throughputs", run);
  EXPECT_DOUBLE_EQ(run["total_token_throughput"].get<double>(),
                   (run["total_input_tokens"].get<double>() + out) / run["duration_s"].get<double>());
  EXPECT_EQ(run["good_requests"], completed);  // --slo ttft:600000 is met by all
  Expect(run["peak_concurrency"] >= 1 && run["peak_output_throughput"] > 0, "peaks", run);
  for (const char* metric : {"ttft", "tpot", "itl", "e2el"}) {
    const nlohmann::json& d = run[metric];
    double previous = 0;
    for (const char* p : {"p50", "p90", "p99"}) {
      ASSERT_TRUE(d["percentiles_ms"].contains(p)) << metric << " " << d.dump();
      const double v = d["percentiles_ms"][p];
      Expect(v > 0 && v >= previous, absl::StrCat(metric, " ", p, " positive and ordered"), d);
      previous = v;
    }
    Expect(d["mean_ms"] > 0 && d["std_ms"] >= 0, absl::StrCat(metric, " mean and std"), d);
  }
  Expect(run["e2el"]["median_ms"] >= run["ttft"]["median_ms"], "e2el median >= ttft median", run);
}

TEST(BenchAndMetrics, ServeRunIsConsistentAndMetricsAddUp) {
  TempDir dir;
  const std::string model = MakeModel(dir.path(), "qwen3");
  Coordinator c = StartCoordinator(model, 1, dir.path() + "/coordinator.log",
                                   {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_NE(c.stub, nullptr);
  const int port = MetricsPort(c.process->Log());
  ASSERT_GT(port, 0) << c.process->Log();
  for (const char* service : {"tpserve.liveness", "tpserve.readiness"}) {
    EXPECT_EQ(RunCommand({BinaryPath("tools/client/tpserve-client"), "health", "--server", c.address, "--service",
                          service},
                         dir.path() + "/health.log"),
              0)
        << service;
  }

  std::vector<std::string> scrapes;
  auto keep = [&](const std::string& text) {
    scrapes.push_back(absl::StrCat(dir.path(), "/scrape", scrapes.size(), ".txt"));
    std::ofstream(scrapes.back()) << text;
  };
  keep(Scrape(port));
  const std::string json = dir.path() + "/bench.json";
  Process bench({BinaryPath("tools/bench/tpserve-bench"), "serve", "--server", c.address, "--request-rate", "8",
                 "--num-prompts", std::to_string(kPrompts), "--input-len", "4..24", "--output-len", "2..12",
                 "--slo", "ttft:600000", "--json", json, "--timeout", "120"},
                dir.path() + "/bench.log");
  int status = -1;
  while ((status = bench.Wait(absl::Milliseconds(250))) == -1) keep(Scrape(port));
  ASSERT_EQ(status, 0) << bench.Log();
  absl::SleepFor(absl::Milliseconds(200));  // the engine publishes its idle state after the last step
  keep(Scrape(port));

  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "bench.json is not JSON:\n" << bench.Log();
  CheckBenchJson(doc);

  std::vector<std::string> check = {TPSERVE_PYTHON3, TPSERVE_CHECK_METRICS, json};
  check.insert(check.end(), scrapes.begin(), scrapes.end());
  const std::string check_log = dir.path() + "/check.log";
  EXPECT_EQ(RunCommand(check, check_log), 0) << [&] {
    std::ifstream f(check_log);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }();
}

}  // namespace
}  // namespace tpserve::e2e
