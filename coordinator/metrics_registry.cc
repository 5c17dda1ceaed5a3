#include "coordinator/metrics_registry.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/check.h"

namespace tpserve {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':'; });
}

// Integers as integers (exact up to 2^53), else 15 significant digits when
// they read back as the same double, else 17 (which always do).
std::string Value(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return absl::StrCat(static_cast<int64_t>(v));
  std::string short_form = absl::StrFormat("%.15g", v);
  return std::strtod(short_form.c_str(), nullptr) == v ? short_form : absl::StrFormat("%.17g", v);
}

// Backslash, double quote and line feed escaped, as the format asks.
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string LabelText(const MetricLabels& labels) {
  if (labels.empty()) return "";
  return absl::StrCat("{", absl::StrJoin(labels, ",", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, "=\"", Escape(kv.second), "\"");
  }), "}");
}

}  // namespace

MetricHistogram::MetricHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {
  TPSERVE_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds must ascend");
}

void MetricHistogram::Observe(double value) {
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += value;
}

MetricHistogram::Snapshot MetricHistogram::snapshot() const {
  Snapshot s;
  absl::MutexLock lock(&mu_);
  s.sum = sum_;
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  return s;
}

MetricsRegistry::Family& MetricsRegistry::FamilyOf(const std::string& name, const std::string& help, Kind kind) {
  TPSERVE_CHECK(ValidName(name), "bad metric name " + name);
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.kind = kind;
    it->second.help = help;
  }
  TPSERVE_CHECK(it->second.kind == kind, "metric " + name + " registered twice with different kinds");
  return it->second;
}

MetricCounter& MetricsRegistry::Counter(const std::string& name, const std::string& help, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyOf(name, help, Kind::kCounter).counters[labels];
  if (!slot) slot = std::make_unique<MetricCounter>();
  return *slot;
}

MetricGauge& MetricsRegistry::Gauge(const std::string& name, const std::string& help, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyOf(name, help, Kind::kGauge).gauges[labels];
  if (!slot) slot = std::make_unique<MetricGauge>();
  return *slot;
}

MetricHistogram& MetricsRegistry::Histogram(const std::string& name, const std::string& help,
                                            std::vector<double> bounds, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Family& family = FamilyOf(name, help, Kind::kHistogram);
  if (family.histograms.empty()) family.bounds = std::move(bounds);
  auto& slot = family.histograms[labels];
  if (!slot) slot = std::make_unique<MetricHistogram>(family.bounds);
  return *slot;
}

std::string MetricsRegistry::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter" : f.kind == Kind::kGauge ? "gauge" : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ", type, "\n");
    for (const auto& [labels, c] : f.counters) absl::StrAppend(&out, name, LabelText(labels), " ", Value(c->value()), "\n");
    for (const auto& [labels, g] : f.gauges) absl::StrAppend(&out, name, LabelText(labels), " ", Value(g->value()), "\n");
    for (const auto& [labels, h] : f.histograms) {
      const MetricHistogram::Snapshot s = h->snapshot();
      for (size_t i = 0; i < s.cumulative.size(); ++i) {
        MetricLabels with_le = labels;
        with_le.emplace_back("le", i < f.bounds.size() ? Value(f.bounds[i]) : "+Inf");
        absl::StrAppend(&out, name, "_bucket", LabelText(with_le), " ", s.cumulative[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelText(labels), " ", Value(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", LabelText(labels), " ", s.count, "\n");
    }
  }
  return out;
}

std::vector<double> Buckets125(double max) {
  std::vector<double> out;
  for (double exponent = 1;; exponent *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * exponent > max) return out;
      out.push_back(m * exponent);
    }
  }
}

}  // namespace tpserve
