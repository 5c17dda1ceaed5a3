#include "tools/bench/report.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tpserve::bench {
namespace {

std::string Line(absl::string_view name, const std::string& value) {
  return absl::StrFormat("%-40s %-10s\n", name, value);
}
std::string Num(double v) { return absl::StrFormat("%.2f", v); }
std::string Heading(absl::string_view title) {
  const int pad = std::max(0, 50 - static_cast<int>(title.size()));
  return absl::StrCat(std::string(pad / 2, '-'), title, std::string(pad - pad / 2, '-'), "\n");
}
std::string PercentileName(double p) { return absl::StrFormat("P%g", p); }

std::string DistributionLines(absl::string_view title, absl::string_view name, const Distribution& d) {
  std::string s = Heading(title);
  s += Line(absl::StrCat("Mean ", name, " (ms):"), Num(d.mean_ms));
  s += Line(absl::StrCat("Median ", name, " (ms):"), Num(d.median_ms));
  s += Line(absl::StrCat("Std ", name, " (ms):"), Num(d.std_ms));
  for (const auto& [p, v] : d.percentiles_ms) s += Line(absl::StrCat(PercentileName(p), " ", name, " (ms):"), Num(v));
  return s;
}

nlohmann::json DistributionJson(const Distribution& d) {
  nlohmann::json j = {{"count", d.count}, {"mean_ms", d.mean_ms}, {"median_ms", d.median_ms}, {"std_ms", d.std_ms}};
  nlohmann::json p = nlohmann::json::object();
  for (const auto& [q, v] : d.percentiles_ms) p[absl::StrFormat("p%g", q)] = v;
  j["percentiles_ms"] = p;
  return j;
}

// Speculative decoding's section, as vLLM's bench serve prints it.
std::string SpecDecodeLines(const SpecDecodeMetrics& s) {
  std::string out = Heading("Speculative Decoding");
  out += Line("Acceptance rate (%):", Num(100 * s.acceptance_rate));
  out += Line("Acceptance length:", Num(s.acceptance_length));
  out += Line("Drafts:", absl::StrCat(s.drafts));
  out += Line("Draft tokens:", absl::StrCat(s.draft_tokens));
  out += Line("Accepted tokens:", absl::StrCat(s.accepted_tokens));
  std::vector<std::string> rates;
  for (double r : s.per_position) rates.push_back(Num(100 * r));
  out += Line("Per-position acceptance (%):", absl::StrJoin(rates, ", "));
  return out;
}

nlohmann::json SpecDecodeJson(const std::optional<SpecDecodeMetrics>& s) {
  if (!s.has_value()) return nullptr;
  return {{"acceptance_rate", s->acceptance_rate}, {"acceptance_length", s->acceptance_length},
          {"drafts", s->drafts},                   {"draft_tokens", s->draft_tokens},
          {"accepted_tokens", s->accepted_tokens}, {"per_position_acceptance", s->per_position}};
}

}  // namespace

std::string FormatTable(const RunReport& run, bool serve_mode) {
  const ServingMetrics& m = run.metrics;
  std::string s = "============ Serving Benchmark Result ============\n";
  if (serve_mode) s += Line("Traffic request rate (req/s):", std::isinf(run.request_rate) ? "inf" : Num(run.request_rate));
  s += Line("Successful requests:", absl::StrCat(m.completed));
  s += Line("Failed requests:", absl::StrCat(m.failed));
  s += Line("Benchmark duration (s):", Num(m.duration_s));
  s += Line("Total input tokens:", absl::StrCat(m.total_input_tokens));
  s += Line("Total generated tokens:", absl::StrCat(m.total_output_tokens));
  s += Line("Prefix cache hit rate (%):", Num(100 * m.prefix_cache_hit_rate));
  s += Line("Request throughput (req/s):", Num(m.request_throughput));
  s += Line("Request goodput (req/s):", Num(m.request_goodput));
  s += Line("Output token throughput (tok/s):", Num(m.output_throughput));
  s += Line("Total Token throughput (tok/s):", Num(m.total_token_throughput));
  if (serve_mode) {
    s += Line("Peak output token throughput (tok/s):", Num(m.peak_output_throughput));
    s += Line("Peak concurrent requests:", absl::StrCat(m.peak_concurrency));
    s += DistributionLines("Time to First Token", "TTFT", m.ttft);
    s += DistributionLines("Time per Output Token (excl. 1st token)", "TPOT", m.tpot);
    s += DistributionLines("Inter-token Latency", "ITL", m.itl);
    s += DistributionLines("End-to-end Latency", "E2EL", m.e2el);
  }
  if (m.spec_decode.has_value()) s += SpecDecodeLines(*m.spec_decode);
  for (const std::string& e : run.errors) s += absl::StrCat("failure: ", e, "\n");
  s += "==================================================\n";
  return s;
}

nlohmann::json RunToJson(const RunReport& run) {
  const ServingMetrics& m = run.metrics;
  return {{"request_rate", std::isinf(run.request_rate) ? nlohmann::json("inf") : nlohmann::json(run.request_rate)},
          {"completed", m.completed},
          {"failed", m.failed},
          {"duration_s", m.duration_s},
          {"total_input_tokens", m.total_input_tokens},
          {"total_output_tokens", m.total_output_tokens},
          {"total_cached_tokens", m.total_cached_tokens},
          {"prefix_cache_hit_rate", m.prefix_cache_hit_rate},
          {"total_chunks", m.total_chunks},
          {"request_throughput", m.request_throughput},
          {"output_throughput", m.output_throughput},
          {"total_token_throughput", m.total_token_throughput},
          {"good_requests", m.good_requests},
          {"request_goodput", m.request_goodput},
          {"peak_output_throughput", m.peak_output_throughput},
          {"peak_concurrency", m.peak_concurrency},
          {"ttft", DistributionJson(m.ttft)},
          {"tpot", DistributionJson(m.tpot)},
          {"itl", DistributionJson(m.itl)},
          {"e2el", DistributionJson(m.e2el)},
          {"spec_decode", SpecDecodeJson(m.spec_decode)},
          {"errors", run.errors}};
}

absl::Status PlotPercentiles(const std::vector<RunReport>& runs, const std::string& path) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError(
        "--plot needs gnuplot: apt-get install gnuplot-nox (scripts/install-deps.sh installs it)");
  }
  const std::string data = path + ".dat";
  std::vector<double> ps;
  {
    std::ofstream out(data);
    for (const RunReport& r : runs) {
      if (std::isinf(r.request_rate)) continue;
      out << r.request_rate;
      ps.clear();
      for (const Distribution* d : {&r.metrics.ttft, &r.metrics.tpot, &r.metrics.itl}) {
        for (const auto& [p, v] : d->percentiles_ms) {
          out << ' ' << v;
          ps.push_back(p);
        }
      }
      out << '\n';
    }
  }
  if (ps.empty()) return absl::InvalidArgumentError("--plot: no run at a finite --request-rate to draw");
  const size_t per = ps.size() / 3;
  std::vector<std::string> curves;
  const char* names[] = {"TTFT", "TPOT", "ITL"};
  for (size_t k = 0; k < 3; ++k) {
    for (size_t i = 0; i < per; ++i) {
      curves.push_back(absl::StrFormat("'%s' using 1:%d with linespoints title '%s P%g'", data, 2 + k * per + i,
                                       names[k], ps[k * per + i]));
    }
  }
  const std::string script = absl::StrCat(
      "set terminal pngcairo size 900,600 noenhanced\n", "set output '", path, "'\n",
      "set title 'tpserve-bench: latency percentiles against request rate'\n",
      "set xlabel 'request rate (req/s)'\nset ylabel 'ms'\nset logscale y\nset grid\nset key outside right\n",
      "plot ", absl::StrJoin(curves, ", "), "\n");
  FILE* gnuplot = popen("gnuplot 2>&1", "w");
  if (gnuplot == nullptr) return absl::InternalError("--plot: cannot start gnuplot");
  std::fwrite(script.data(), 1, script.size(), gnuplot);
  const int status = pclose(gnuplot);
  std::remove(data.c_str());
  if (status != 0) return absl::InternalError(absl::StrCat("--plot: gnuplot failed drawing ", path));
  return absl::OkStatus();
}

}  // namespace tpserve::bench
