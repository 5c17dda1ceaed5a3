// The serving benchmark's statistics, defined as vLLM's benchmark_serving
// defines them, so tpserve-bench's numbers can be set beside vLLM's. Pure
// functions of the requests' timelines: no gRPC, no clock.
//
// Per successful request (all times in seconds from its send):
//   TTFT     arrival of the first streamed chunk;
//   latency  (end-to-end) arrival of the last chunk;
//   TPOT     (latency - TTFT) / (output tokens - 1), only when output tokens > 1;
//   ITL      every gap between consecutive chunks (chunks - 1 of them).
// Over the run (duration = first send to last answer):
//   request throughput = successful / duration; output throughput = generated
//   tokens / duration; total token throughput = (input + generated) / duration;
//   goodput = requests meeting every SLO given / duration, where a request with
//   at most one output token counts as TPOT 0 (as vLLM does);
//   peak output throughput = most tokens whose chunk arrived within one
//   1-second bucket counted from the first send (vLLM counts one token per
//   chunk; here a chunk's own token count, the same when chunks carry one);
//   peak concurrency = most requests active in one such bucket (a request is
//   active in every bucket from its send's to its last chunk's).
// Speculative decoding (when the server verified drafts during the run), from
// its counters (GetServerInfo's spec_decode_*, the metrics' tpserve:spec_decode_*)
// read before and after the run, as vLLM's bench reads /metrics: everything
// the server verified meanwhile, another client's requests included.
//   acceptance rate = accepted tokens / draft tokens;
//   acceptance length = 1 + accepted tokens / drafts (tokens a verification
//   step gives a sequence, its own token included);
//   per-position acceptance = drafts whose token at position i was accepted / drafts.
// Distributions: mean, median, population standard deviation and the
// percentiles asked for, by linear interpolation between order statistics
// (numpy.percentile's default); reported in milliseconds. An empty one is all 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve::bench {

// One request as the client saw it.
struct RequestRecord {
  bool success = false;
  std::string error;               // why it failed (gRPC code and message)
  double start = 0;                // send time, seconds since the run began
  double ttft = 0;                 // first chunk's arrival - send
  double latency = 0;              // last chunk's arrival - send
  std::vector<double> itl;         // [chunks - 1] gaps between consecutive chunks' arrivals
  std::vector<int64_t> chunk_tokens;  // [chunks] token ids in each chunk
  int64_t prompt_tokens = 0;       // as the server counted them (Complete.usage)
  int64_t output_tokens = 0;       // as the server counted them (Complete.usage)
  int64_t cached_tokens = 0;       // prompt tokens served from the prefix cache (Complete.usage)
};

// Service-level objectives for goodput, in milliseconds; unset = not checked.
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};

struct Distribution {
  int64_t count = 0;
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p in [0, 100], value)
};

// A server's speculative-decoding counters at one moment (GetServerInfo).
struct SpecDecodeCounts {
  uint64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  std::vector<uint64_t> accepted_per_pos;  // [positions] drafts accepted at position i
};

struct SpecDecodeMetrics {
  int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;  // during the run
  double acceptance_rate = 0;    // accepted_tokens / draft_tokens, in [0, 1]
  double acceptance_length = 0;  // 1 + accepted_tokens / drafts
  std::vector<double> per_position;  // [positions] accepted at position i / drafts, in [0, 1]
};

// The run's figures from the counters before and after it; none when it
// verified no draft (speculation off) or a counter went back (the server
// restarted meanwhile).
std::optional<SpecDecodeMetrics> ComputeSpecDecode(const SpecDecodeCounts& before, const SpecDecodeCounts& after);

struct ServingMetrics {
  int64_t completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  int64_t total_cached_tokens = 0;    // prompt tokens the prefix cache served
  double prefix_cache_hit_rate = 0;   // total_cached_tokens / total_input_tokens
  int64_t total_chunks = 0;  // over successful requests
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  int64_t good_requests = 0;  // meeting every SLO (all successful ones without SLOs)
  double request_goodput = 0;
  double peak_output_throughput = 0;  // tokens/s in the busiest 1-second bucket
  int64_t peak_concurrency = 0;
  Distribution ttft, tpot, itl, e2el;
  std::optional<SpecDecodeMetrics> spec_decode;  // set by the caller (ComputeSpecDecode)
};

// numpy.percentile(values, p) (linear interpolation); `values` need not be sorted,
// must not be empty; p in [0, 100].
double Percentile(std::vector<double> values, double p);

// `seconds` summarized in milliseconds at `percentiles`.
Distribution Summarize(const std::vector<double>& seconds, const std::vector<double>& percentiles);

ServingMetrics ComputeMetrics(const std::vector<RequestRecord>& requests, double duration_s,
                              const std::vector<double>& percentiles, const Slo& slo);

// "50,90,99" -> {50, 90, 99}; each in [0, 100]. INVALID_ARGUMENT naming --percentiles.
absl::StatusOr<std::vector<double>> ParsePercentiles(absl::string_view text);

// "ttft:200,tpot:50" (keys ttft, tpot, e2el; milliseconds, > 0); "" = none.
// INVALID_ARGUMENT naming --slo and the piece.
absl::StatusOr<Slo> ParseSlo(absl::string_view text);

}  // namespace tpserve::bench
