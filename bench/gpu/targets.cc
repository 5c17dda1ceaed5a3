#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "bench/gpu/bench_util.h"

namespace tpserve::gpu_bench {
namespace {

struct Goal {
  const char* what;
  const char* goal;
  bool lower_is_better;  // the worst of several records is the largest (else the smallest)
  double first, final;   // the first and final goals (equal when it has one)
  const char* unit;
};

constexpr Goal kGoals[] = {
    {"batch-1 decode step, graph replay, context 512 (Qwen3-0.6B shapes)", "<= 0.45 ms, then <= 0.35 ms", true, 0.45,
     0.35, "ms"},
    {"decode attention, batch 64, context 1024..32768, share of copy bandwidth (worst context)", ">= 85%", false, 85,
     85, "%"},
    {"offline workload, 256 sequences, 100..1024 in and out, output tokens/s", ">= 20,000", false, 20000, 20000,
     "tok/s"},
    {"sampler, batch 1, vocabulary 151,936, temperature + top-p, graph replay", "<= 15 us", true, 15, 15, "us"},
};
constexpr int kTargets = sizeof(kGoals) / sizeof(kGoals[0]);

double g_worst[kTargets] = {NAN, NAN, NAN, NAN};

}  // namespace

void RecordTarget(Target target, double value) {
  const int i = static_cast<int>(target);
  double& w = g_worst[i];
  if (std::isnan(w) || (kGoals[i].lower_is_better ? value > w : value < w)) w = value;
}

std::string TargetsTable(bool smoke) {
  std::string out = "\n## Issue 12's targets\n\n";
  if (smoke) out += "Smoke run: tiny shapes, so nothing below is judged.\n\n";
  out += "| target | goal | measured | met |\n|---|---|---|---|\n";
  for (int i = 0; i < kTargets; ++i) {
    const Goal& g = kGoals[i];
    const double v = g_worst[i];
    char measured[64] = "not measured";
    if (!std::isnan(v)) std::snprintf(measured, sizeof measured, v >= 1000 ? "%.0f %s" : "%.3g %s", v, g.unit);
    std::string met = "-";
    if (!smoke && !std::isnan(v)) {
      auto meets = [&](double goal) { return g.lower_is_better ? v <= goal : v >= goal; };
      met = meets(g.final) ? "yes" : meets(g.first) ? "first goal only" : "no";
    }
    out += std::string("| ") + g.what + " | " + g.goal + " | " + measured + " | " + met + " |\n";
  }
  return out;
}

}  // namespace tpserve::gpu_bench
