// tpserve-bench's output: the table it prints (laid out as vLLM's
// benchmark_serving prints its own), the --json document and the --plot chart.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "tools/bench/serving_stats.h"

namespace tpserve::bench {

// One run of a benchmark: its request rate (inf for all at once) and figures.
struct RunReport {
  double request_rate = 0;
  ServingMetrics metrics;
  std::vector<std::string> errors;  // the distinct failure messages, at most a few
};

// The result table of one run; a "Speculative Decoding" section when the
// server verified drafts during it (ServingMetrics::spec_decode).
std::string FormatTable(const RunReport& run, bool serve_mode);

// Every figure of a run, times in ms, throughputs per second; rate inf is "inf";
// "spec_decode" null without speculation.
nlohmann::json RunToJson(const RunReport& run);

// A PNG at `path` drawing TTFT, TPOT and ITL at each percentile against the
// request rate (runs at rate inf are left out) with gnuplot. FAILED_PRECONDITION
// saying how to install gnuplot when it is missing.
absl::Status PlotPercentiles(const std::vector<RunReport>& runs, const std::string& path);

}  // namespace tpserve::bench
