// Runs one benchmark: sends the prompts at their arrival times over the
// public API (tpserve.v1.Generation/Generate, streaming), each on a thread of
// its own, and records each request's timeline (serving_stats.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tools/bench/serving_stats.h"
#include "tools/bench/workload.h"
#include "tools/connect/connect.h"
#include "tpserve/v1/generation.pb.h"

namespace tpserve::bench {

// At most this many requests in flight (threads) whatever --max-concurrency says.
inline constexpr int64_t kMaxInFlight = 1024;

struct RunOptions {
  double request_rate = 0;       // requests/s; inf = all at once
  double burstiness = 1;         // gamma shape of the gaps (1 = Poisson)
  int64_t max_concurrency = 0;   // 0 = kMaxInFlight
  uint64_t seed = 0;             // of the arrival times
  double request_timeout_s = 0;  // each request's deadline
  double max_seconds = 0;        // the whole run's: requests still open then are cancelled (failed)
  bool ignore_eos = true;
  float temperature = 0;
  // Every request's structured_output (--regex, --json-schema), or unset:
  // free text. A constrained request ends when its grammar does (EOS).
  std::optional<tpserve::v1::StructuredOutput> structured_output;
  bool progress = false;         // a progress bar on stderr
};

struct RunResult {
  std::vector<RequestRecord> records;  // [prompts], in prompt order
  double duration_s = 0;               // first send to last answer
};

RunResult RunBenchmark(const ClientConnection& connection, const std::vector<BenchPrompt>& prompts,
                       const RunOptions& options);

}  // namespace tpserve::bench
