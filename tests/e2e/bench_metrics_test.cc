// tpserve-bench against a CPU deployment (tp 1, the tiny model) while /metrics
// is scraped: the benchmark's JSON is complete and consistent, and the
// scrapes parse with Prometheus's own text parser, with counters that only
// grow, gauges back at idle and histograms that counted every request
// (tests/e2e/check_metrics.py). Also the liveness and readiness health names.
// And what routers read: GetLoads, `tpserve-client loads` and the {dp_rank}
// gauges agree, idle and with requests running and queued; at --dp 2 each
// group's series apart.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>

#include <gtest/gtest.h>

#include <thread>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "absl/time/clock.h"
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

v1::Loads GetLoads(v1::Generation::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::Loads loads;
  const grpc::Status status = stub.GetLoads(&context, v1::LoadsRequest(), &loads);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return loads;
}

// The value of `name{LABEL="VALUE"}` in a scrape; -1 when absent.
double LabelledValue(const std::string& text, const std::string& name, const std::string& label, uint32_t value) {
  const std::string key = absl::StrCat(name, "{", label, "=\"", value, "\"} ");
  const size_t at = text.find("\n" + key);
  double v = -1;
  if (at == std::string::npos) return v;
  const size_t from = at + 1 + key.size();
  return absl::SimpleAtod(text.substr(from, text.find('\n', from) - from), &v) ? v : -1;
}

// The value of `name{dp_rank="G"}` in a scrape; -1 when absent.
double GroupGauge(const std::string& text, const std::string& name, uint32_t group = 0) {
  return LabelledValue(text, name, "dp_rank", group);
}

// Whether /metrics has the group's figures as GetLoads does. The gauges follow
// the engine's iterations; GetLoads also counts a request whose end was sent
// since (running drops then), so right after the last request they may differ
// until the engine's next iteration.
bool MetricsMatch(const v1::GroupLoad& g, const std::string& scrape) {
  const uint32_t r = g.dp_rank();
  const double total = GroupGauge(scrape, "tpserve:kv_cache_blocks_total", r);
  const double usage = GroupGauge(scrape, "tpserve:kv_cache_usage_perc", r);
  return GroupGauge(scrape, "tpserve:num_requests_running", r) == g.running() &&
         GroupGauge(scrape, "tpserve:num_requests_waiting", r) == g.waiting() &&
         GroupGauge(scrape, "tpserve:kv_cache_blocks_used", r) == g.kv_blocks_used() &&
         total == g.kv_blocks_total() && total > 0 &&
         std::abs(usage - static_cast<double>(g.kv_blocks_used()) / total) <= 1e-6 &&
         GroupGauge(scrape, "tpserve:num_tokens_in_flight", r) == g.tokens_in_flight();
}

// GetLoads twice around a scrape until the two agree (no engine iteration
// between): the three then describe one state, of `groups` groups.
std::pair<v1::Loads, std::string> SteadyLoads(v1::Generation::Stub& stub, int port, int groups) {
  for (int i = 0; i < 200; ++i) {
    const v1::Loads before = GetLoads(stub);
    std::string scrape = Scrape(port);
    const v1::Loads after = GetLoads(stub);
    if (before.groups_size() == groups && after.SerializeAsString() == before.SerializeAsString()) {
      return {before, std::move(scrape)};
    }
  }
  ADD_FAILURE() << "GetLoads never held still across a scrape";
  return {};
}

std::pair<v1::GroupLoad, std::string> SteadyLoad(v1::Generation::Stub& stub, int port) {
  auto [loads, scrape] = SteadyLoads(stub, port, 1);
  return {loads.groups_size() == 1 ? loads.groups(0) : v1::GroupLoad(), std::move(scrape)};
}

// 4 requests of distinct 20-token prompts and 40 tokens each, at most 2 running:
// 2 run and 2 wait, each step 20 ms (--simulate-step-us), so the state holds ~0.8 s.
TEST(Loads, GetLoadsClientAndMetricsAgree) {
  constexpr int kRequests = 4, kRunning = 2, kPromptLen = 20, kMaxTokens = 40, kBlockSize = 16;
  TempDir dir;
  const std::string model = MakeModel(dir.path(), "qwen3");
  Coordinator c = StartCoordinator(model, 1, dir.path() + "/coordinator.log",
                                   {"--metrics-listen", "127.0.0.1:0", "--max-num-seqs", std::to_string(kRunning),
                                    "--simulate-step-us", "20000", "--block-size", std::to_string(kBlockSize)});
  ASSERT_NE(c.stub, nullptr);
  const int port = MetricsPort(c.process->Log());
  ASSERT_GT(port, 0) << c.process->Log();

  const v1::Loads idle = GetLoads(*c.stub);
  EXPECT_EQ(idle.block_size(), static_cast<uint32_t>(kBlockSize));
  ASSERT_EQ(idle.groups_size(), 1);
  const v1::GroupLoad& g0 = idle.groups(0);
  EXPECT_EQ(g0.dp_rank(), 0u);
  EXPECT_TRUE(g0.serving());
  EXPECT_EQ(g0.running() + g0.waiting() + g0.kv_blocks_used() + g0.tokens_in_flight(), 0u);
  EXPECT_EQ(g0.kv_blocks_total(), ServerInfo(*c.stub).num_blocks());
  ASSERT_GT(g0.kv_blocks_total(), 0u);
  const std::string first = Scrape(port);
  EXPECT_TRUE(MetricsMatch(g0, first)) << g0.DebugString() << first;

  std::vector<GenerateOutcome> outcomes(kRequests);
  std::vector<std::thread> clients;
  for (int r = 0; r < kRequests; ++r) {
    clients.emplace_back([&, r] {
      v1::GenerateRequest request = Greedy(kMaxTokens);
      for (int t = 0; t < kPromptLen; ++t) request.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(100 * r + t + 1));
      outcomes[static_cast<size_t>(r)] = Generate(*c.stub, request);
    });
  }
  bool queued = false;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); !queued && absl::Now() < deadline;) {
    const auto [g, scrape] = SteadyLoad(*c.stub, port);
    if (g.running() != kRunning || g.waiting() != kRequests - kRunning || !MetricsMatch(g, scrape)) continue;
    queued = true;
    // Every prompt is in flight, and the running two's output so far.
    EXPECT_GE(g.tokens_in_flight(), static_cast<uint64_t>(kRequests * kPromptLen));
    EXPECT_LE(g.tokens_in_flight(), static_cast<uint64_t>(kRequests * kPromptLen + kRunning * kMaxTokens));
    // The running two hold their prompt and output's blocks (distinct prompts: nothing shared).
    const uint64_t per_prompt = (kPromptLen + kBlockSize - 1) / kBlockSize;
    const uint64_t per_full = (kPromptLen + kMaxTokens + kBlockSize - 1) / kBlockSize;
    EXPECT_GE(g.kv_blocks_used(), kRunning * per_prompt);
    EXPECT_LE(g.kv_blocks_used(), kRunning * per_full);
    // tpserve-client loads prints the same group as JSON.
    const std::string out = dir.path() + "/loads.json";
    ASSERT_EQ(RunCommand({"/bin/sh", "-c", BinaryPath("tools/client/tpserve-client") + " loads --server " +
                                               c.address + " > " + out},
                         dir.path() + "/loads.log"),
              0);
    std::ifstream in(out);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["block_size"], kBlockSize);
    EXPECT_EQ(j["groups"][0]["dp_rank"], 0);
    EXPECT_EQ(j["groups"][0]["kv_blocks_total"], g.kv_blocks_total());
    EXPECT_EQ(j["groups"][0]["running"].get<int>() + j["groups"][0]["waiting"].get<int>(), kRequests) << j.dump();
  }
  EXPECT_TRUE(queued) << "never saw " << kRunning << " running and " << kRequests - kRunning
                      << " waiting in GetLoads and /metrics alike";
  for (std::thread& t : clients) t.join();
  for (const GenerateOutcome& o : outcomes) {
    EXPECT_TRUE(o.completed) << o.status.error_message();
    EXPECT_EQ(o.tokens.size(), static_cast<size_t>(kMaxTokens));
  }
  // Idle again: nothing running, queued, held or in flight, in both.
  std::string scrape;
  for (absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline;) {
    v1::GroupLoad g;
    std::tie(g, scrape) = SteadyLoad(*c.stub, port);
    if (g.running() + g.waiting() + g.kv_blocks_used() + g.tokens_in_flight() == 0 && MetricsMatch(g, scrape)) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ADD_FAILURE() << "the group never went back to idle: " << GetLoads(*c.stub).DebugString() << scrape;
}

// --dp 2 (round-robin, one running per group, 20 ms steps): /metrics has
// each group's series apart, labelled dp_rank="0" and "1", equal to GetLoads's
// group, idle, with one running and one waiting in each, and idle again; the
// groups' ranks are worker_up{rank="0"} and {rank="1"} (G·T + R).
TEST(Loads, MetricsHaveEachDataParallelGroupsSeries) {
  constexpr int kGroups = 2, kRequests = 4, kPromptLen = 20, kMaxTokens = 30;
  TempDir dir;
  const std::string model = MakeModel(dir.path(), "qwen3");
  Coordinator c = StartCoordinator(model, 1, dir.path() + "/coordinator.log",
                                   {"--dp", std::to_string(kGroups), "--dp-routing", "round-robin",
                                    "--metrics-listen", "127.0.0.1:0", "--max-num-seqs", "1",
                                    "--simulate-step-us", "20000"});
  ASSERT_NE(c.stub, nullptr);
  const int port = MetricsPort(c.process->Log());
  ASSERT_GT(port, 0) << c.process->Log();
  auto all_match = [](const v1::Loads& loads, const std::string& scrape) {
    for (const v1::GroupLoad& g : loads.groups()) {
      if (!MetricsMatch(g, scrape)) return false;
    }
    return true;
  };
  {
    const auto [loads, scrape] = SteadyLoads(*c.stub, port, kGroups);
    ASSERT_EQ(loads.groups_size(), kGroups);
    for (int g = 0; g < kGroups; ++g) {
      EXPECT_EQ(loads.groups(g).dp_rank(), static_cast<uint32_t>(g));
      EXPECT_EQ(LabelledValue(scrape, "tpserve:worker_up", "rank", static_cast<uint32_t>(g)), 1.0) << scrape;
    }
    EXPECT_EQ(LabelledValue(scrape, "tpserve:worker_up", "rank", kGroups), -1.0) << "one rank per group";
    EXPECT_EQ(GroupGauge(scrape, "tpserve:num_requests_running", kGroups), -1.0) << "no third group";
    EXPECT_TRUE(all_match(loads, scrape)) << loads.DebugString() << scrape;
  }
  std::vector<GenerateOutcome> outcomes(kRequests);
  std::vector<std::thread> clients;
  for (int r = 0; r < kRequests; ++r) {
    clients.emplace_back([&, r] {
      v1::GenerateRequest request = Greedy(kMaxTokens);
      for (int t = 0; t < kPromptLen; ++t) request.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(100 * r + t + 1));
      outcomes[static_cast<size_t>(r)] = Generate(*c.stub, request);
    });
  }
  bool busy = false;  // each group one running, one waiting, in GetLoads and /metrics alike
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); !busy && absl::Now() < deadline;) {
    const auto [loads, scrape] = SteadyLoads(*c.stub, port, kGroups);
    busy = loads.groups_size() == kGroups && all_match(loads, scrape);
    for (const v1::GroupLoad& g : loads.groups()) busy = busy && g.running() == 1 && g.waiting() == 1;
    if (busy) {
      for (int g = 0; g < kGroups; ++g) EXPECT_GT(GroupGauge(scrape, "tpserve:kv_cache_blocks_used", g), 0) << g;
    }
  }
  EXPECT_TRUE(busy) << "never saw one running and one waiting in each group";
  for (std::thread& t : clients) t.join();
  for (const GenerateOutcome& o : outcomes) {
    EXPECT_TRUE(o.completed) << o.status.error_message();
    EXPECT_EQ(o.tokens.size(), static_cast<size_t>(kMaxTokens));
  }
  std::string last;
  for (absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline;) {
    v1::Loads loads;
    std::tie(loads, last) = SteadyLoads(*c.stub, port, kGroups);
    bool idle = loads.groups_size() == kGroups && all_match(loads, last);
    for (const v1::GroupLoad& g : loads.groups()) idle = idle && g.running() + g.waiting() + g.kv_blocks_used() == 0;
    if (idle) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ADD_FAILURE() << "the groups never went back to idle: " << last;
}

}  // namespace
}  // namespace tpserve::e2e
