// serving_overhead: what the process split costs, next to baselines measured
// in the same run (issue 9, "Benchmarks").
//
//   serving_overhead [--quick] [--json FILE] [--only batch-1|full-batch|constrained] [--coordinator FILE]
//                    [--coordinator-flag FLAG]... [--compare FILE] [--compare-worker FILE]
//                    [--constrained-step-us N]
//
// (--coordinator: another build's tpserve-coordinator, to compare builds
// under the same conditions; the workers are always this build's.
// --coordinator-flag: one more flag for every coordinator, e.g. --output-threads=1.
// --compare: the full-batch section runs this tpserve-coordinator too, its runs
// alternating with this build's.)
// 1. Time per output token at batch 1: the service (tpserve-coordinator
//    --spawn-workers, timed at a gRPC client in this process: (last - first
//    chunk) / (n - 1)) against the in-process engine (tpserve-generate
//    --output-json: decode_seconds / decode_tokens), same model, tp 1 and 2,
//    1000 greedy tokens with ignore_eos, the service with and without --overlap.
// 2. Steps per second through the whole pipeline with --simulate-step-us 300
//    (the workers sleep instead of computing and make up their tokens) at batch
//    1 and 256, overlap and --no-overlap, tp 1 and 2. Every running request gets
//    one token per step, so a request's steps per second is (n - 1) / (last -
//    first chunk); the figure is the median over the batch. The lock-step bound
//    1e6 / (300 + round trip) uses the empty-step round trip p50 that
//    bench/step_roundtrip_bench measures (run here as a child; its own baseline
//    is in its output).
// 3. The full-batch rows and the gRPC floor (serving_full_batch.h): the
//    coordinator's CPU per output token at batch 64, 256 and 1024 with a 2 ms
//    stand-in step, next to what gRPC alone costs to stream the same messages.
// 4. Constrained output (serving_constrained.h): batch 64 with every request
//    held to a JSON Schema against 64 free ones, the 300 us stand-in step,
//    and the CPU one mask costs (--compare-worker: another build's
//    tpserve-worker alongside; --constrained-step-us: another stand-in step,
//    e.g. 1000 to see the masks with cores to spare on a small machine).
// --only batch-1 runs 1 and 2, --only full-batch runs 3, --only constrained runs 4.
// Each figure is the median of 3 repetitions (--quick: 1, and shorter runs).
// Both modes' coordinators are up at once and the repetitions alternate
// (engine, overlap, no-overlap, ...), so that load from elsewhere on a shared
// machine weighs on each alike; the [min-max] printed next to each median
// shows how much it moved. The model is a 2-layer hidden-128 Qwen3 made with
// tpserve-make-model.
// Not run in CI.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/grpc_floor.h"
#include "bench/serving_bench_util.h"
#include "bench/serving_constrained.h"
#include "bench/serving_full_batch.h"
#include "nlohmann/json.hpp"
#include "tpserve/v1/generation.grpc.pb.h"

namespace {

namespace v1 = tpserve::v1;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace tpserve::bench;  // NOLINT: the bench's own helpers (serving_bench_util.h)

constexpr int kTpotTokens = 1000;     // batch-1 time per output token: tokens per request
constexpr int kSimulatedStepUs = 300;
constexpr int kBigBatch = 256;
constexpr int kBigBatchMaxTokens = 1024;  // sizes the KV pool of the simulated servers
constexpr int kSimulatedMaxModelLen = 12288;

struct Settings {
  int repetitions = 3;
  double simulated_seconds = 2.0;  // length of one simulated-step measurement
  unsigned cores = 1;
  fs::path scratch;                // model, logs
  double load_start = NAN;         // 1-minute load average when it started
};

// The engine's time per output token (µs): tpserve-generate's decode seconds /
// decode tokens, with the BLAS threads a spawned worker gets (cores / tp).
double EngineTpotUs(const Settings& st, const fs::path& model, int tp) {
  const fs::path out = st.scratch / "engine.json";
  std::vector<std::string> prompt;
  const v1::GenerateRequest request = Request(1, 0);  // a prompt like the service's
  for (uint32_t id : request.prompt_token_ids().ids()) prompt.push_back(std::to_string(id));
  const std::vector<std::string> argv = {
      Tool("tools/engine_cli/tpserve-generate"), "--model", model.string(), "--tp", std::to_string(tp),
      "--threads", std::to_string(std::max(1u, st.cores / static_cast<unsigned>(tp))),
      "--prompt-ids", absl::StrJoin(prompt, ","), "--max-tokens", std::to_string(kTpotTokens),
      "--ignore-eos", "--max-position", "2048", "--output-json", out.string()};
  const fs::path log = st.scratch / "engine.log";
  if (const int rc = RunToEnd(argv, log); rc != 0) {
    Die(absl::StrCat(absl::StrJoin(argv, " "), " exited with ", rc, ":\n", ReadFile(log)));
  }
  const json stats = json::parse(ReadFile(out)).at("stats");
  const double tokens = stats.at("decode_tokens").get<double>();
  if (tokens != kTpotTokens - 1) Die(absl::StrCat("the engine decoded ", tokens, " tokens, not ", kTpotTokens - 1));
  return 1e6 * stats.at("decode_seconds").get<double>() / tokens;
}

// The service's time per output token (µs) at batch 1, one 1000-token request.
double ServiceTpotUs(Server& server, int salt) {
  const Stream s = RunConcurrently(server.stub(), {Request(kTpotTokens, salt)})[0];
  if (s.tokens != kTpotTokens) Die(absl::StrCat("the service streamed ", s.tokens, " tokens, not ", kTpotTokens));
  return 1e6 / StepsPerSecond(s);
}

// The median over the batch of each request's steps per second.
double BatchStepsPerSecond(Server& server, int batch, int max_tokens, int* salt) {
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < batch; ++i) requests.push_back(Request(max_tokens, ++*salt));
  std::vector<double> rates;
  for (const Stream& s : RunConcurrently(server.stub(), requests)) {
    if (s.tokens != max_tokens) Die(absl::StrCat("a request streamed ", s.tokens, " tokens, not ", max_tokens));
    rates.push_back(StepsPerSecond(s));
  }
  return Median(rates);
}

struct SimulatedRun {
  int max_tokens = 0;                    // per request, sized for ~simulated_seconds
  std::vector<double> steps_per_second;  // one per repetition
};

// max_tokens for about `seconds` of steps at `batch`, from a short run.
int SizeSimulatedRun(Server& server, int batch, double seconds, int* salt) {
  const int cap = batch == 1 ? kSimulatedMaxModelLen - kPromptTokens - 8 : kBigBatchMaxTokens;
  const double rate = BatchStepsPerSecond(server, batch, batch == 1 ? 300 : 24, salt);
  return std::clamp(static_cast<int>(rate * seconds), 50, cap);
}

// One "LABEL  mean X us   p50 Y us ..." line of step_roundtrip_bench.
struct RoundTripLine {
  std::string label;
  double p50_us = 0;
};

// Every line of step_roundtrip_bench's output that has a p50 figure.
std::vector<RoundTripLine> ParseRoundTrips(const std::string& output) {
  std::vector<RoundTripLine> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    const size_t mean = line.find(" mean ");
    const size_t p50 = line.find(" p50 ");
    double value = 0;
    if (mean == std::string::npos || p50 == std::string::npos || !(std::istringstream(line.substr(p50 + 5)) >> value)) {
      continue;
    }
    std::string label = line.substr(0, mean);
    label.erase(label.find_last_not_of(' ') + 1);
    lines.push_back({label, value});
  }
  return lines;
}

struct RoundTrip {
  std::vector<RoundTripLine> steps;       // "empty step ..." lines (one per transport it measures)
  std::optional<RoundTripLine> baseline;  // "baseline: ..." (a unary gRPC call on loopback)
  // The fastest empty step: the lock-step bound's round trip (the highest bound).
  std::optional<RoundTripLine> fastest() const {
    if (steps.empty()) return std::nullopt;
    return *std::min_element(steps.begin(), steps.end(),
                             [](const RoundTripLine& a, const RoundTripLine& b) { return a.p50_us < b.p50_us; });
  }
};

// Runs bench/step_roundtrip_bench and reads its p50 figures.
RoundTrip MeasureRoundTrip(const Settings& st) {
  const fs::path log = st.scratch / "step_roundtrip_bench.out";
  const std::vector<std::string> argv = {Tool("bench/step_roundtrip_bench"), "--iterations",
                                         st.repetitions > 1 ? "2000" : "500"};
  const int rc = RunToEnd(argv, log);
  const std::string out = ReadFile(log);
  RoundTrip rt;
  for (RoundTripLine& line : ParseRoundTrips(out)) {
    if (line.label.rfind("empty step", 0) == 0) rt.steps.push_back(std::move(line));
    else if (line.label.rfind("baseline", 0) == 0) rt.baseline = std::move(line);
  }
  if (rc != 0 || rt.steps.empty()) {
    std::fprintf(stderr, "serving_overhead: step_roundtrip_bench (exit %d) gave no empty-step p50:\n%s\n", rc,
                 out.c_str());
  }
  return rt;
}

// Every figure of one tp: batch-1 time per token (µs) of the engine and of the
// service in both modes, and simulated steps per second at batch 1 and 256.
struct TpResult {
  int tp = 1;
  std::vector<double> engine_us, overlap_us, lockstep_us;
  SimulatedRun overlap_b1, lockstep_b1, overlap_big, lockstep_big;
};

std::string ModeFlag(bool overlap) { return overlap ? "--overlap" : "--no-overlap"; }

// A coordinator of each mode, both up at once so that their runs can
// alternate: load from elsewhere on a shared machine then weighs on both alike.
struct ServerPair {
  std::unique_ptr<Server> overlap, lockstep;
  Server& get(bool overlapped) { return overlapped ? *overlap : *lockstep; }
};

ServerPair StartBoth(const Settings& st, const fs::path& model, int tp, const std::vector<std::string>& flags,
                     const std::string& name) {
  ServerPair pair;
  for (bool overlap : {true, false}) {
    std::vector<std::string> extra = flags;
    extra.push_back(ModeFlag(overlap));
    const fs::path log = st.scratch / absl::StrCat("coordinator-", name, "-tp", tp, ModeFlag(overlap), ".log");
    (overlap ? pair.overlap : pair.lockstep) = StartCoordinator(model, tp, extra, log);
  }
  return pair;
}

// Repetitions alternate engine, overlap, no-overlap.
void MeasureTpot(const Settings& st, const fs::path& model, TpResult& r) {
  Progress(absl::StrCat("tp ", r.tp, ": time per token, engine and service"));
  ServerPair servers =
      StartBoth(st, model, r.tp, {"--max-model-len", "2048", "--num-gpu-blocks-override", "256"}, "tpot");
  int salt = 0;
  for (bool overlap : {true, false}) RunConcurrently(servers.get(overlap).stub(), {Request(16, ++salt)});  // warm-up
  for (int i = 0; i < st.repetitions; ++i) {
    r.engine_us.push_back(EngineTpotUs(st, model, r.tp));
    r.overlap_us.push_back(ServiceTpotUs(servers.get(true), ++salt));
    r.lockstep_us.push_back(ServiceTpotUs(servers.get(false), ++salt));
  }
}

// Each (batch, mode) gets its own length, then repetitions alternate the modes.
void MeasureSimulated(const Settings& st, const fs::path& model, TpResult& r) {
  Progress(absl::StrCat("tp ", r.tp, ": simulated steps"));
  const int blocks = kBigBatch * ((kPromptTokens + kBigBatchMaxTokens + 15) / 16) + 64;
  ServerPair servers = StartBoth(st, model, r.tp,
                                 {"--simulate-step-us", std::to_string(kSimulatedStepUs), "--max-model-len",
                                  std::to_string(kSimulatedMaxModelLen), "--num-gpu-blocks-override",
                                  std::to_string(blocks), "--max-num-seqs", std::to_string(kBigBatch)},
                                 "simulated");
  int salt = 0;
  const std::tuple<int, bool, SimulatedRun*> runs[] = {
      {1, true, &r.overlap_b1}, {1, false, &r.lockstep_b1},
      {kBigBatch, true, &r.overlap_big}, {kBigBatch, false, &r.lockstep_big}};
  for (const auto& [batch, overlap, run] : runs) {
    run->max_tokens = SizeSimulatedRun(servers.get(overlap), batch, st.simulated_seconds, &salt);
  }
  for (int i = 0; i < st.repetitions; ++i) {
    for (const auto& [batch, overlap, run] : runs) {
      run->steps_per_second.push_back(BatchStepsPerSecond(servers.get(overlap), batch, run->max_tokens, &salt));
    }
  }
}

std::string Ratio(double a, double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", a / b);
  return buf;
}

void PrintTpot(const std::vector<TpResult>& results) {
  std::printf("\ntime per output token at batch 1, %d greedy tokens (us; median [min-max])\n", kTpotTokens);
  std::printf("%3s  %-20s %-22s %-8s %-22s %-8s\n", "tp", "engine", "service overlap", "/engine",
              "service no-overlap", "/engine");
  for (const TpResult& r : results) {
    const double e = Median(r.engine_us);
    std::printf("%3d  %-20s %-22s %-8s %-22s %-8s\n", r.tp, Spread(r.engine_us, "%.1f").c_str(),
                Spread(r.overlap_us, "%.1f").c_str(), Ratio(Median(r.overlap_us), e).c_str(),
                Spread(r.lockstep_us, "%.1f").c_str(), Ratio(Median(r.lockstep_us), e).c_str());
  }
}

void PrintSimulated(const std::vector<TpResult>& results, const RoundTrip& rt) {
  std::printf("\nsteps per second, --simulate-step-us %d (median over a batch's requests; median [min-max] "
              "of the repetitions)\n", kSimulatedStepUs);
  std::printf("%3s %6s %9s  %-22s %-22s %-10s\n", "tp", "batch", "tokens", "overlap", "no-overlap",
              "overlap/no");
  for (const TpResult& r : results) {
    for (const auto& [batch, on, off] : {std::tuple{1, &r.overlap_b1, &r.lockstep_b1},
                                         std::tuple{kBigBatch, &r.overlap_big, &r.lockstep_big}}) {
      std::printf("%3d %6d %9s  %-22s %-22s %s\n", r.tp, batch,
                  absl::StrCat(on->max_tokens, "/", off->max_tokens).c_str(),
                  Spread(on->steps_per_second, "%.0f").c_str(), Spread(off->steps_per_second, "%.0f").c_str(),
                  Ratio(Median(on->steps_per_second), Median(off->steps_per_second)).c_str());
      if (Median(on->steps_per_second) > 1.02e6 / kSimulatedStepUs) {
        std::printf("    ^ faster than one step per %d us: the workers did not simulate (--simulate-step-us "
                    "ignored: the real model ran)\n", kSimulatedStepUs);
      }
    }
  }
  const std::optional<RoundTripLine> fastest = rt.fastest();
  if (fastest) {
    std::printf("lock-step bound 1e6 / (%d + round trip p50 %.1f us) = %.0f steps/s (round trip: \"%s\")\n",
                kSimulatedStepUs, fastest->p50_us, 1e6 / (kSimulatedStepUs + fastest->p50_us),
                fastest->label.c_str());
  } else {
    std::printf("lock-step bound: n/a (step_roundtrip_bench gave no round trip)\n");
  }
  std::printf("\nround trip p50, measured by bench/step_roundtrip_bench (coordinator <-> 2 workers):\n");
  for (const RoundTripLine& line : rt.steps) {
    std::printf("  %-44s %8.1f us   lock-step bound %5.0f steps/s\n", line.label.c_str(), line.p50_us,
                1e6 / (kSimulatedStepUs + line.p50_us));
  }
  if (rt.baseline) std::printf("  %-44s %8.1f us\n", rt.baseline->label.c_str(), rt.baseline->p50_us);
}

json RunJson(const SimulatedRun& run) {
  return {{"max_tokens", run.max_tokens}, {"steps_per_second", run.steps_per_second},
          {"median", Median(run.steps_per_second)}};
}

json ToJson(const Settings& st, const std::vector<TpResult>& results, const RoundTrip& rt, double seconds) {
  json j = {{"cores", st.cores}, {"repetitions", st.repetitions}, {"tpot_tokens", kTpotTokens},
            {"load_average_start", st.load_start}, {"load_average_end", LoadAverage()},
            {"simulate_step_us", kSimulatedStepUs}, {"big_batch", kBigBatch}, {"wall_seconds", seconds}};
  j["model"] = "qwen3, 2 layers, hidden 128 (tpserve-make-model defaults otherwise), seed 1";
  for (const TpResult& r : results) {
    json t = {{"tp", r.tp}};
    t["tpot_us"] = {{"engine", r.engine_us}, {"engine_median", Median(r.engine_us)},
                    {"overlap", r.overlap_us}, {"overlap_median", Median(r.overlap_us)},
                    {"no_overlap", r.lockstep_us}, {"no_overlap_median", Median(r.lockstep_us)},
                    {"overlap_over_engine", Median(r.overlap_us) / Median(r.engine_us)},
                    {"no_overlap_over_engine", Median(r.lockstep_us) / Median(r.engine_us)}};
    t["simulated"] = {{"batch_1", {{"overlap", RunJson(r.overlap_b1)}, {"no_overlap", RunJson(r.lockstep_b1)}}},
                      {absl::StrCat("batch_", kBigBatch),
                       {{"overlap", RunJson(r.overlap_big)}, {"no_overlap", RunJson(r.lockstep_big)}}}};
    j["by_tp"].push_back(t);
  }
  json trips = json::object();
  for (const RoundTripLine& line : rt.steps) trips[line.label] = line.p50_us;
  if (rt.baseline) trips[rt.baseline->label] = rt.baseline->p50_us;
  j["round_trip_p50_us"] = trips;
  const std::optional<RoundTripLine> fastest = rt.fastest();
  j["lockstep_bound_steps_per_second"] = fastest ? json(1e6 / (kSimulatedStepUs + fastest->p50_us)) : json(nullptr);
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--grpc-floor-server") {  // a child of the full-batch section
    int step_us = 0;
    if (!absl::SimpleAtoi(argv[2], &step_us) || step_us <= 0) Die("--grpc-floor-server STEP_US");
    return RunGrpcFloorServer(step_us);
  }
  const auto start = Clock::now();
  Settings st;
  std::string json_path;
  std::string only;     // one section, or all
  std::string compare;  // full batch: another build's tpserve-coordinator, alongside
  std::string compare_worker;  // constrained: another build's tpserve-worker, alongside
  int constrained_step_us = 300;  // constrained: the stand-in step
  const std::string usage =
      "usage: serving_overhead [--quick] [--json FILE] [--only batch-1|full-batch|constrained] [--coordinator FILE] "
      "[--coordinator-flag FLAG]... [--compare FILE] [--compare-worker FILE] [--constrained-step-us N]";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      st.repetitions = 1;
      st.simulated_seconds = 1.0;
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--coordinator" && i + 1 < argc) {
      SetCoordinatorBinary(argv[++i]);
    } else if (a == "--compare" && i + 1 < argc) {
      compare = argv[++i];
    } else if (a == "--compare-worker" && i + 1 < argc) {
      compare_worker = argv[++i];
    } else if (a == "--constrained-step-us" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &constrained_step_us) || constrained_step_us <= 0) {
        Die(absl::StrCat("--constrained-step-us takes a positive number of microseconds; ", usage));
      }
    } else if (a == "--coordinator-flag" && i + 1 < argc) {
      AddCoordinatorFlag(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
      if (only != "batch-1" && only != "full-batch" && only != "constrained") Die(usage);
    } else {
      Die(absl::StrCat("unknown argument ", a, "; ", usage));
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  st.cores = std::max(1u, std::thread::hardware_concurrency());
  st.scratch = fs::temp_directory_path() / absl::StrCat("tpserve-serving-overhead-", getpid());
  fs::create_directories(st.scratch);
  const fs::path model = st.scratch / "model";
  const std::vector<std::string> make = {Tool("tools/make_model/tpserve-make-model"), model.string(), "--arch", "qwen3",
                                         "--layers", "2", "--hidden", "128", "--max-pos", "16384", "--seed", "1"};
  if (RunToEnd(make, st.scratch / "make_model.log") != 0) Die(ReadFile(st.scratch / "make_model.log"));
  st.load_start = LoadAverage();
  std::printf("serving_overhead: %s, %u cores (load average %.2f), %d repetition(s), binaries in %s\n",
              "Qwen3 2 layers hidden 128 (tpserve-make-model defaults otherwise)", st.cores, st.load_start,
              st.repetitions, TPSERVE_BINARY_DIR);
  std::fflush(stdout);
  json j;
  if (only.empty() || only == "batch-1") {
    std::vector<TpResult> results;
    for (int tp : {1, 2}) {
      TpResult r;
      r.tp = tp;
      MeasureTpot(st, model, r);
      MeasureSimulated(st, model, r);
      results.push_back(std::move(r));
    }
    Progress("step_roundtrip_bench");
    const RoundTrip rt = MeasureRoundTrip(st);
    PrintTpot(results);
    PrintSimulated(results, rt);
    j = ToJson(st, results, rt, 0);
  }
  if (only.empty() || only == "full-batch") {
    const FullBatchSettings fb{
        .repetitions = st.repetitions, .scratch = st.scratch, .model = model, .self = argv[0], .compare_binary = compare};
    j["full_batch"] = RunFullBatch(fb);
  }
  if (only.empty() || only == "constrained") {
    const ConstrainedSettings cs{
        .repetitions = st.repetitions, .step_us = constrained_step_us, .scratch = st.scratch,
        .compare_worker = compare_worker};
    j["constrained"] = RunConstrained(cs);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  j["wall_seconds"] = seconds;
  std::printf("\n(%.0f s in all; load average now %.2f)\n", seconds, LoadAverage());
  if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
  fs::remove_all(st.scratch);
  return 0;
}
