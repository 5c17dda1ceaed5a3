#include "bench/serving_constrained.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/serving_bench_util.h"

namespace tpserve::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kVocab = 151936;  // Qwen3's logits ids
constexpr int kMaxModelLen = 512;

// The tpserve-worker that the coordinator `parent` spawned: its descendant
// (/proc/PID/stat's parent pid) whose name starts so.
pid_t WorkerOf(pid_t parent) {
  std::vector<std::pair<pid_t, pid_t>> links;  // (pid, its parent)
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    const std::string stat = ReadFile(e.path() / "stat");
    const size_t paren = stat.rfind(')');
    const std::vector<std::string> fields = absl::StrSplit(stat.substr(std::min(paren + 2, stat.size())), ' ');
    pid_t ppid = 0;
    if (paren != std::string::npos && fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid)) {
      links.push_back({pid, ppid});
    }
  }
  std::vector<pid_t> family = {parent};
  for (size_t i = 0; i < family.size(); ++i) {
    for (const auto& [pid, ppid] : links) {
      if (ppid != family[i]) continue;
      if (absl::StartsWith(ReadFile(absl::StrCat("/proc/", pid, "/comm")), "tpserve-worker")) return pid;
      family.push_back(pid);
    }
  }
  Die(absl::StrCat("tpserve-coordinator ", parent, " has no tpserve-worker among its descendants"));
}

// One server under test: a coordinator and its worker.
struct Side {
  std::string name;  // "this build", or the compared worker
  std::unique_ptr<Server> server;
  pid_t worker = 0;
  // One entry per repetition.
  std::vector<double> free_steps, constrained_steps;         // median steps/s over the batch
  std::vector<double> free_cpu_us, constrained_cpu_us;       // coordinator + worker + client CPU per step
  std::vector<double> mask_us;  // the worker's CPU per step, constrained minus free, per sequence: one mask
};

struct RunFigures {
  double steps_per_second = NAN, cpu_per_step_us = NAN, worker_cpu_per_step_us = NAN;
};

RunFigures RunBatch(Side& side, const ConstrainedSettings& st, const std::string& schema, int* salt) {
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < st.batch; ++i) {
    v1::GenerateRequest r = Request(st.tokens, ++*salt);
    if (!schema.empty()) {
      r.mutable_stopping()->set_ignore_eos(false);  // refused with a constraint; the schema cannot end this soon
      r.mutable_structured_output()->set_json_schema(schema);
    }
    requests.push_back(std::move(r));
  }
  const CpuSample coord0 = SampleCpu(side.server->pid()), worker0 = SampleCpu(side.worker), self0 = SampleCpu(getpid());
  const std::vector<Stream> streams = RunConcurrently(side.server->stub(), requests);
  const CpuSpent coord = CpuBetween(coord0, SampleCpu(side.server->pid()));
  const CpuSpent worker = CpuBetween(worker0, SampleCpu(side.worker));
  const CpuSpent self = CpuBetween(self0, SampleCpu(getpid()));
  std::vector<double> rates;
  for (const Stream& s : streams) {
    if (s.tokens != st.tokens) {
      Die(absl::StrCat(side.name, ": a ", schema.empty() ? "free" : "constrained", " request streamed ", s.tokens,
                       " tokens, not ", st.tokens));
    }
    rates.push_back(StepsPerSecond(s));
  }
  RunFigures f;
  f.steps_per_second = Median(rates);
  f.cpu_per_step_us = 1e6 * (coord.all_seconds + worker.all_seconds + self.all_seconds) / st.tokens;
  f.worker_cpu_per_step_us = 1e6 * worker.all_seconds / st.tokens;
  return f;
}

void Print(const std::vector<Side>& sides, const ConstrainedSettings& st) {
  std::printf("\nconstrained output: batch %d, --simulate-step-us %d, %d tokens a request, %d logits ids "
              "(median [min-max] of %d repetitions)\n", st.batch, st.step_us, st.tokens, kVocab, st.repetitions);
  std::printf("%-16s %-18s %-18s %-8s %-22s %-22s %s\n", "worker", "free steps/s", "constrained", "c/free",
              "CPU/step free (us)", "CPU/step constrained", "CPU per mask (us)");
  for (const Side& s : sides) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", Median(s.constrained_steps) / Median(s.free_steps));
    std::printf("%-16s %-18s %-18s %-8s %-22s %-22s %s\n", s.name.c_str(), Spread(s.free_steps, "%.0f").c_str(),
                Spread(s.constrained_steps, "%.0f").c_str(), ratio, Spread(s.free_cpu_us, "%.0f").c_str(),
                Spread(s.constrained_cpu_us, "%.0f").c_str(), Spread(s.mask_us, "%.2f").c_str());
    const double mask_step_us = st.batch * Median(s.mask_us);
    const double free_busy = Median(s.free_cpu_us) * Median(s.free_steps) / 1e6;
    std::printf("  %s: one step's masks %.0f us of CPU against the %d us step; the free run keeps %.2f cores busy "
                "(coordinator, worker, client); hiding the masks needs %.2f more: %.1f cores in all, %u here\n",
                s.name.c_str(), mask_step_us, st.step_us, free_busy, mask_step_us / st.step_us,
                free_busy + mask_step_us / st.step_us, std::max(1u, std::thread::hardware_concurrency()));
  }
}

json SideJson(const Side& s) {
  return {{"worker", s.name},
          {"free_steps_per_second", s.free_steps},
          {"constrained_steps_per_second", s.constrained_steps},
          {"ratio", Median(s.constrained_steps) / Median(s.free_steps)},
          {"cpu_per_step_us_free", s.free_cpu_us},
          {"cpu_per_step_us_constrained", s.constrained_cpu_us},
          {"worker_cpu_us_per_mask", s.mask_us}};
}

}  // namespace

json RunConstrained(const ConstrainedSettings& st) {
  Progress("constrained: model and servers");
  const fs::path model = st.scratch / "model-151936";
  const std::vector<std::string> make = {Tool("tools/make_model/tpserve-make-model"), model.string(), "--arch",
                                         "qwen3", "--layers", "2", "--hidden", "128", "--vocab",
                                         std::to_string(kVocab), "--max-pos", "2048", "--seed", "1"};
  if (RunToEnd(make, st.scratch / "make_model_151936.log") != 0) Die(ReadFile(st.scratch / "make_model_151936.log"));
  const std::string schema = ReadFile(fs::path(TPSERVE_SOURCE_DIR) / "bench/results/constrained-array-schema.json");
  const std::vector<std::string> flags = {
      "--simulate-step-us", std::to_string(st.step_us), "--max-model-len", std::to_string(kMaxModelLen),
      "--max-num-seqs", std::to_string(st.batch), "--num-gpu-blocks-override",
      std::to_string(st.batch * (kMaxModelLen / 16) + 64)};
  std::vector<Side> sides(st.compare_worker.empty() ? 1 : 2);
  for (size_t i = 0; i < sides.size(); ++i) {
    std::vector<std::string> extra = flags;
    if (i == 1) extra.insert(extra.end(), {"--worker-binary", st.compare_worker});  // the last one given wins
    sides[i].name = i == 0 ? "this build" : "compared";
    const fs::path log = st.scratch / absl::StrCat("coordinator-constrained-", i, ".log");
    sides[i].server = StartCoordinator(model, 1, extra, log);
    sides[i].worker = WorkerOf(sides[i].server->pid());
  }
  int salt = 0;
  for (Side& s : sides) {  // warm-up: the schema compiled, its first masks cached
    const ConstrainedSettings warm{.batch = st.batch, .tokens = 24, .step_us = st.step_us};
    RunBatch(s, warm, "", &salt);
    RunBatch(s, warm, schema, &salt);
  }
  for (int r = 0; r < st.repetitions; ++r) {
    for (Side& s : sides) {
      Progress(absl::StrCat("constrained: ", s.name, ", repetition ", r + 1));
      const RunFigures free = RunBatch(s, st, "", &salt);
      const RunFigures held = RunBatch(s, st, schema, &salt);
      s.free_steps.push_back(free.steps_per_second);
      s.free_cpu_us.push_back(free.cpu_per_step_us);
      s.constrained_steps.push_back(held.steps_per_second);
      s.constrained_cpu_us.push_back(held.cpu_per_step_us);
      s.mask_us.push_back((held.worker_cpu_per_step_us - free.worker_cpu_per_step_us) / st.batch);
    }
  }
  Print(sides, st);
  json out = {{"batch", st.batch}, {"tokens", st.tokens}, {"simulate_step_us", st.step_us}, {"vocab", kVocab},
              {"load_average_end", LoadAverage()}};
  for (const Side& s : sides) out["by_worker"].push_back(SideJson(s));
  return out;
}

}  // namespace tpserve::bench
