#include "bench/serving_full_batch.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/grpc_floor.h"
#include "bench/serving_bench_util.h"

namespace tpserve::bench {
namespace {

namespace v1 = tpserve::v1;
namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kStepUs = 2000;
constexpr int kBatches[] = {64, 256, 1024};
constexpr int kMaxBatch = 1024;
constexpr int kBatchOneStepUs = 300;
constexpr int kBatchOneTokens = 3000;

// One batch run as the server and the client saw it.
struct Run {
  double cpu_all_us = 0;      // server CPU per output token, every thread
  double cpu_busiest_us = 0;  // the busiest thread's
  std::string busiest;        // its name
  double cpu_per_message_us = 0;
  double tokens_per_message = 0;
  double tpot_p50_ms = 0, tpot_p99_ms = 0;
  std::map<std::string, double> by_thread_us;  // CPU per output token by thread (pools together)
};

Run Measure(Server& server, int batch, int tokens, int* salt) {
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < batch; ++i) requests.push_back(Request(tokens, ++*salt));
  const CpuSample before = SampleCpu(server.pid());
  const std::vector<Stream> streams = RunConcurrently(server.stub(), requests);
  const CpuSample after = SampleCpu(server.pid());
  const CpuSpent spent = CpuBetween(before, after);
  double n = 0, messages = 0;
  std::vector<double> tpot;
  for (const Stream& s : streams) {
    if (s.tokens != tokens) Die(absl::StrCat("a request streamed ", s.tokens, " tokens, not ", tokens));
    n += static_cast<double>(s.tokens);
    messages += static_cast<double>(s.chunks.size());
    tpot.push_back(TimePerOutputToken(s));
  }
  std::map<std::string, double> by_thread;
  for (const auto& [name, seconds] : spent.by_name) by_thread[name] = 1e6 * seconds / n;
  return {.cpu_all_us = 1e6 * spent.all_seconds / n,
          .cpu_busiest_us = 1e6 * spent.busiest_seconds / n,
          .busiest = spent.busiest_name,
          .cpu_per_message_us = 1e6 * spent.all_seconds / messages,
          .tokens_per_message = n / messages,
          .tpot_p50_ms = 1e3 * Percentile(tpot, 50),
          .tpot_p99_ms = 1e3 * Percentile(tpot, 99),
          .by_thread_us = std::move(by_thread)};
}

// The repetitions of one (server, batch).
struct Runs {
  std::vector<Run> runs;
  std::vector<double> Get(double Run::*field) const {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(r.*field);
    return v;
  }
  // The busiest thread's name in most runs.
  std::string Busiest() const {
    std::map<std::string, int> count;
    for (const Run& r : runs) ++count[r.busiest];
    std::string best;
    int most = 0;
    for (const auto& [name, c] : count) {
      if (c > most) best = name, most = c;
    }
    return best;
  }
  // "name median, ..." of the CPU per token by thread, most first (those above 0.05 us).
  std::string ByThread() const {
    std::map<std::string, std::vector<double>> all;
    for (const Run& r : runs) {
      for (const auto& [name, us] : r.by_thread_us) all[name].push_back(us);
    }
    std::vector<std::pair<double, std::string>> sorted;
    for (const auto& [name, v] : all) sorted.emplace_back(Median(v), name);
    std::sort(sorted.rbegin(), sorted.rend());
    std::string out;
    for (const auto& [us, name] : sorted) {
      if (us < 0.05) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%s %.2f", out.empty() ? "" : ", ", name.c_str(), us);
      out += buf;
    }
    return out;
  }
  json ToJson() const {
    json j = json::array();
    for (const Run& r : runs) {
      j.push_back({{"cpu_all_us_per_token", r.cpu_all_us}, {"cpu_busiest_us_per_token", r.cpu_busiest_us},
                   {"busiest_thread", r.busiest}, {"cpu_us_per_message", r.cpu_per_message_us},
                   {"tokens_per_message", r.tokens_per_message}, {"tpot_p50_ms", r.tpot_p50_ms},
                   {"tpot_p99_ms", r.tpot_p99_ms}, {"cpu_us_per_token_by_thread", r.by_thread_us}});
    }
    return j;
  }
};

std::unique_ptr<Server> StartFloor(const FullBatchSettings& st, const std::string& name) {
  return std::make_unique<Server>(std::vector<std::string>{st.self, "--grpc-floor-server", std::to_string(kStepUs)},
                                  st.scratch / name, kGrpcFloorMarker, "");
}

std::vector<std::string> CoordinatorFlags(int step_us, int max_tokens, int batch) {
  const int blocks = batch * ((kPromptTokens + max_tokens + 16) / 16) + 64;
  return {"--simulate-step-us", std::to_string(step_us), "--max-model-len", std::to_string(max_tokens + 64),
          "--num-gpu-blocks-override", std::to_string(blocks), "--max-num-seqs", std::to_string(batch),
          "--max-queue", "4096", "--max-streams-per-client", "0"};
}

}  // namespace

json RunFullBatch(const FullBatchSettings& st) {
  json out = {{"simulate_step_us", kStepUs}, {"tokens_per_request", st.tokens}, {"repetitions", st.repetitions},
              {"load_average_start", LoadAverage()}};
  // The builds measured: this one, and the one to compare with, their runs alternating.
  std::vector<std::pair<std::string, std::string>> builds = {{"this", ""}};
  if (!st.compare_binary.empty()) builds.emplace_back("compare", st.compare_binary);
  int salt = 100000;
  std::map<int, Runs> floor;                                     // by batch (the floor has no tp)
  std::map<std::tuple<std::string, int, int>, Runs> coordinator;  // by (build, tp, batch)
  std::map<std::pair<std::string, int>, Runs> batch_one;          // by (build, tp)
  for (int tp : {1, 2}) {
    Progress(absl::StrCat("full batch, tp ", tp));
    std::vector<std::unique_ptr<Server>> servers, ones;
    for (const auto& [label, binary] : builds) {
      servers.push_back(StartCoordinator(st.model, tp, CoordinatorFlags(kStepUs, st.tokens, kMaxBatch),
                                         st.scratch / absl::StrCat("coordinator-full-batch-", label, "-tp", tp, ".log"),
                                         binary));
      ones.push_back(StartCoordinator(st.model, tp, CoordinatorFlags(kBatchOneStepUs, kBatchOneTokens, 4),
                                      st.scratch / absl::StrCat("coordinator-batch-one-", label, "-tp", tp, ".log"),
                                      binary));
      (void)Measure(*servers.back(), 64, 32, &salt);  // warm-up
      (void)Measure(*ones.back(), 1, 200, &salt);
    }
    auto floor_server = tp == 1 ? StartFloor(st, "grpc-floor.log") : nullptr;
    if (floor_server) (void)Measure(*floor_server, 64, 32, &salt);
    for (int rep = 0; rep < st.repetitions; ++rep) {
      for (int batch : kBatches) {
        Progress(absl::StrCat("tp ", tp, " batch ", batch, " repetition ", rep + 1));
        for (size_t b = 0; b < builds.size(); ++b) {
          coordinator[{builds[b].first, tp, batch}].runs.push_back(Measure(*servers[b], batch, st.tokens, &salt));
        }
        if (floor_server) floor[batch].runs.push_back(Measure(*floor_server, batch, st.tokens, &salt));
      }
      Progress(absl::StrCat("tp ", tp, " batch 1, ", kBatchOneStepUs, " us step, repetition ", rep + 1));
      for (size_t b = 0; b < builds.size(); ++b) {
        batch_one[{builds[b].first, tp}].runs.push_back(Measure(*ones[b], 1, kBatchOneTokens, &salt));
      }
    }
  }

  std::printf("\nfull batch: --simulate-step-us %d, %d greedy tokens a request, one client thread; CPU per output "
              "token from /proc/PID/task (us); time per output token (TPOT) over the batch's requests (ms); "
              "median [min-max] of %d%s\n",
              kStepUs, st.tokens, st.repetitions,
              st.compare_binary.empty() ? "" : absl::StrCat("; \"compare\" is ", st.compare_binary).c_str());
  std::printf("%-8s %3s %6s  %-20s %-32s %-22s %-22s %-9s\n", "build", "tp", "batch", "coordinator, all",
              "busiest thread", "TPOT p50", "TPOT p99", "tok/msg");
  for (const auto& [key, r] : coordinator) {
    const auto& [label, tp, batch] = key;
    std::printf("%-8s %3d %6d  %-20s %-32s %-22s %-22s %-9s\n", label.c_str(), tp, batch,
                Spread(r.Get(&Run::cpu_all_us), "%.2f").c_str(),
                absl::StrCat(Spread(r.Get(&Run::cpu_busiest_us), "%.2f"), " (", r.Busiest(), ")").c_str(),
                Spread(r.Get(&Run::tpot_p50_ms), "%.2f").c_str(), Spread(r.Get(&Run::tpot_p99_ms), "%.2f").c_str(),
                Spread(r.Get(&Run::tokens_per_message), "%.2f").c_str());
  }
  std::printf("\nthe coordinator's CPU per output token by thread (us, median; a pool's threads together)\n");
  for (const auto& [key, r] : coordinator) {
    const auto& [label, tp, batch] = key;
    std::printf("%-8s %3d %6d  %s\n", label.c_str(), tp, batch, r.ByThread().c_str());
  }
  std::printf("\nthe gRPC floor (bench/grpc_floor.h): ready-made messages at the same cadence to the same clients\n");
  std::printf("%6s  %-20s %-20s %-32s %-22s %-22s %-9s\n", "batch", "us/message, all", "us/token, all",
              "busiest thread us/token", "TPOT p50", "TPOT p99", "tok/msg");
  for (const auto& [batch, r] : floor) {
    std::printf("%6d  %-20s %-20s %-32s %-22s %-22s %-9s\n", batch,
                Spread(r.Get(&Run::cpu_per_message_us), "%.2f").c_str(), Spread(r.Get(&Run::cpu_all_us), "%.2f").c_str(),
                absl::StrCat(Spread(r.Get(&Run::cpu_busiest_us), "%.2f"), " (", r.Busiest(), ")").c_str(),
                Spread(r.Get(&Run::tpot_p50_ms), "%.2f").c_str(), Spread(r.Get(&Run::tpot_p99_ms), "%.2f").c_str(),
                Spread(r.Get(&Run::tokens_per_message), "%.2f").c_str());
  }
  std::printf("\nbatch 1, --simulate-step-us %d, %d tokens: time per output token (us) and coordinator CPU per token\n",
              kBatchOneStepUs, kBatchOneTokens);
  for (const auto& [key, r] : batch_one) {
    std::vector<double> us;
    for (double ms : r.Get(&Run::tpot_p50_ms)) us.push_back(1e3 * ms);
    std::printf("%-8s tp %d: TPOT %s us, coordinator CPU %s us/token (busiest %s, %s)\n", key.first.c_str(),
                key.second, Spread(us, "%.1f").c_str(), Spread(r.Get(&Run::cpu_all_us), "%.1f").c_str(),
                Spread(r.Get(&Run::cpu_busiest_us), "%.1f").c_str(), r.Busiest().c_str());
  }
  std::fflush(stdout);

  for (const auto& [key, r] : coordinator) {
    out["coordinator"].push_back({{"build", std::get<0>(key)}, {"tp", std::get<1>(key)}, {"batch", std::get<2>(key)},
                                  {"runs", r.ToJson()}});
  }
  for (const auto& [batch, r] : floor) out["grpc_floor"].push_back({{"batch", batch}, {"runs", r.ToJson()}});
  for (const auto& [key, r] : batch_one) {
    out["batch_1"].push_back({{"build", key.first}, {"tp", key.second}, {"simulate_step_us", kBatchOneStepUs},
                              {"runs", r.ToJson()}});
  }
  if (!st.compare_binary.empty()) out["compare_binary"] = st.compare_binary;
  out["load_average_end"] = LoadAverage();
  return out;
}

}  // namespace tpserve::bench
