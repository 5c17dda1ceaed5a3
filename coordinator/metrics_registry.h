// Counters, gauges and histograms, rendered in the Prometheus text exposition
// format (version 0.0.4) for the coordinator's --metrics-listen endpoint
// (coordinator/metrics_server.h) and read back for GetServerInfo.
//
// Thread-safe: any thread may update any metric; Render takes a consistent
// view of each metric (not of all at once). Metrics are created once, at
// start-up, and live as long as the registry; the references handed out stay
// valid. A metric is named by its name and its labels: asking again for the
// same pair returns the same metric.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace tpserve {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;  // (name, value), in order

// Only grows. Prometheus names counters ..._total.
class MetricCounter {
 public:
  void Increment(double by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class MetricGauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Cumulative buckets with upper bounds `bounds` (ascending) plus +Inf.
class MetricHistogram {
 public:
  explicit MetricHistogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // [bounds + 1]: observations <= bound; the last is +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // [bounds + 1], per bucket (not cumulative)
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

class MetricsRegistry {
 public:
  // `name` must match [a-zA-Z_:][a-zA-Z0-9_:]*; one `help` and kind per name.
  MetricCounter& Counter(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  MetricGauge& Gauge(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  // The bounds of the first histogram of a name hold for all of its labels.
  MetricHistogram& Histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                             const MetricLabels& labels = {});

  // Every metric, families sorted by name: # HELP, # TYPE, then its samples.
  std::string Render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Family {
    Kind kind;
    std::string help;
    std::vector<double> bounds;  // histograms
    std::map<MetricLabels, std::unique_ptr<MetricCounter>> counters;
    std::map<MetricLabels, std::unique_ptr<MetricGauge>> gauges;
    std::map<MetricLabels, std::unique_ptr<MetricHistogram>> histograms;
  };
  Family& FamilyOf(const std::string& name, const std::string& help, Kind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

// 1, 2, 5, 10, 20, 50, ... up to and including `max` (vLLM's build_1_2_5_buckets).
std::vector<double> Buckets125(double max);

}  // namespace tpserve
