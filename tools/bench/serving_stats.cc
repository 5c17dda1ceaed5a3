#include "tools/bench/serving_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tpserve::bench {

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = rank - static_cast<double>(below);
  return values[below] + (values[above] - values[below]) * fraction;
}

Distribution Summarize(const std::vector<double>& seconds, const std::vector<double>& percentiles) {
  Distribution d;
  d.count = static_cast<int64_t>(seconds.size());
  for (double p : percentiles) d.percentiles_ms.emplace_back(p, 0.0);
  if (seconds.empty()) return d;
  const double n = static_cast<double>(seconds.size());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  double squares = 0;
  for (double s : seconds) squares += (s - mean) * (s - mean);
  d.mean_ms = mean * 1000;
  d.std_ms = std::sqrt(squares / n) * 1000;
  d.median_ms = Percentile(seconds, 50) * 1000;
  for (auto& [p, value] : d.percentiles_ms) value = Percentile(seconds, p) * 1000;
  return d;
}

namespace {

// TPOT of a successful request, 0 when it has at most one output token.
double Tpot(const RequestRecord& r) {
  return r.output_tokens > 1 ? (r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1) : 0.0;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (slo.ttft_ms && r.ttft * 1000 > *slo.ttft_ms) return false;
  if (slo.tpot_ms && Tpot(r) * 1000 > *slo.tpot_ms) return false;
  if (slo.e2el_ms && r.latency * 1000 > *slo.e2el_ms) return false;
  return true;
}

// Peak tokens per 1-second bucket and peak requests active in one bucket,
// buckets counted from the earliest send of a successful request.
void Peaks(const std::vector<RequestRecord>& requests, ServingMetrics& m) {
  double first = INFINITY, last = -INFINITY;
  for (const RequestRecord& r : requests) {
    if (!r.success) continue;
    first = std::min(first, r.start);
    last = std::max(last, r.start + r.latency);
  }
  if (!(first <= last)) return;
  const size_t buckets = static_cast<size_t>(std::ceil(last - first)) + 1;
  std::vector<double> tokens(buckets, 0.0);
  std::vector<int64_t> active(buckets, 0);
  for (const RequestRecord& r : requests) {
    if (!r.success) continue;
    double t = r.start + r.ttft;
    for (size_t c = 0; c < r.chunk_tokens.size(); ++c) {
      if (c > 0) t += r.itl[c - 1];
      const double bucket = std::floor(t - first);
      if (bucket >= 0 && bucket < static_cast<double>(buckets)) {
        tokens[static_cast<size_t>(bucket)] += static_cast<double>(r.chunk_tokens[c]);
      }
    }
    const size_t from = static_cast<size_t>(r.start - first);
    const size_t to = std::min(static_cast<size_t>(r.start + r.latency - first), buckets - 1);
    for (size_t b = from; b <= to; ++b) ++active[b];
  }
  m.peak_output_throughput = *std::max_element(tokens.begin(), tokens.end());
  m.peak_concurrency = *std::max_element(active.begin(), active.end());
}

}  // namespace

ServingMetrics ComputeMetrics(const std::vector<RequestRecord>& requests, double duration_s,
                              const std::vector<double>& percentiles, const Slo& slo) {
  ServingMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestRecord& r : requests) {
    if (!r.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    m.total_cached_tokens += r.cached_tokens;
    m.total_chunks += static_cast<int64_t>(r.chunk_tokens.size());
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
    if (r.output_tokens > 1) tpots.push_back(Tpot(r));
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    if (MeetsSlo(r, slo)) ++m.good_requests;
  }
  if (m.total_input_tokens > 0) {
    m.prefix_cache_hit_rate = static_cast<double>(m.total_cached_tokens) / static_cast<double>(m.total_input_tokens);
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
    m.request_goodput = static_cast<double>(m.good_requests) / duration_s;
  }
  Peaks(requests, m);
  m.ttft = Summarize(ttfts, percentiles);
  m.tpot = Summarize(tpots, percentiles);
  m.itl = Summarize(itls, percentiles);
  m.e2el = Summarize(e2els, percentiles);
  return m;
}

std::optional<SpecDecodeMetrics> ComputeSpecDecode(const SpecDecodeCounts& before, const SpecDecodeCounts& after) {
  if (after.drafts <= before.drafts || after.draft_tokens < before.draft_tokens ||
      after.accepted_tokens < before.accepted_tokens) {
    return std::nullopt;
  }
  SpecDecodeMetrics m;
  m.drafts = static_cast<int64_t>(after.drafts - before.drafts);
  m.draft_tokens = static_cast<int64_t>(after.draft_tokens - before.draft_tokens);
  m.accepted_tokens = static_cast<int64_t>(after.accepted_tokens - before.accepted_tokens);
  const auto drafts = static_cast<double>(m.drafts);
  m.acceptance_rate = m.draft_tokens > 0 ? static_cast<double>(m.accepted_tokens) / static_cast<double>(m.draft_tokens) : 0;
  m.acceptance_length = 1 + static_cast<double>(m.accepted_tokens) / drafts;
  for (size_t i = 0; i < after.accepted_per_pos.size(); ++i) {
    const uint64_t was = i < before.accepted_per_pos.size() ? before.accepted_per_pos[i] : 0;
    if (after.accepted_per_pos[i] < was) return std::nullopt;
    m.per_position.push_back(static_cast<double>(after.accepted_per_pos[i] - was) / drafts);
  }
  return m;
}

absl::StatusOr<std::vector<double>> ParsePercentiles(absl::string_view text) {
  std::vector<double> out;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double p = 0;
    if (!absl::SimpleAtod(piece, &p) || !(p >= 0 && p <= 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--percentiles: \"", piece, "\" is not a number in [0, 100]; e.g. --percentiles 50,90,99"));
    }
    out.push_back(p);
  }
  return out;
}

absl::StatusOr<Slo> ParseSlo(absl::string_view text) {
  Slo slo;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(piece, absl::MaxSplits(':', 1));
    double ms = 0;
    std::optional<double>* field = kv.first == "ttft" ? &slo.ttft_ms
                                   : kv.first == "tpot" ? &slo.tpot_ms
                                   : kv.first == "e2el" ? &slo.e2el_ms
                                                        : nullptr;
    if (field == nullptr || !absl::SimpleAtod(kv.second, &ms) || !(ms > 0) || !std::isfinite(ms)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--slo: \"", piece, "\" is not KEY:MILLISECONDS with KEY ttft, tpot or e2el and a positive number; "
          "e.g. --slo ttft:200,tpot:50"));
    }
    *field = ms;
  }
  return slo;
}

}  // namespace tpserve::bench
