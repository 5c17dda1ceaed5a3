// spec_decode_bench: the cost of speculative verification on the CPU backend.
// c(k) = the time of a step in which each of B decoding sequences carries its
// last token and k proposed ones (k + 1 query tokens at consecutive positions
// over the paged cache, k + 1 logits rows: backend/step.h), over the time of
// the one-token decode step (k = 0) of the same B sequences.
//
//   spec_decode_bench [--cache DIR] [--context 128] [--batches 1,8,64] [--ks 0,1,2,3,4,5,6,7,8]
//                     [--reps 3] [--threads N] [--replay-tokens 33] [--replay-k 4] [--replay-p 0,0.2,0.5,1]
//
// The Qwen3-0.6B-shaped model (random bf16 weights computed in fp32) is the one
// engine_cpu_bench generates into DIR (default $TPSERVE_BENCH_CACHE, else
// ~/.cache/tpserve/bench), made here the same way if missing. The forward is
// Model::Forward (worker/model.h) as the step runner calls it, logits copied
// to the host included; each sequence has `context` tokens in the cache
// (zero-filled K/V: attention reads and computes over them as over real ones)
// and blocks of its own. A step's time is the median of --reps runs after one
// warm-up, the ks taking turns within each run (the load of a shared machine
// reaches them alike). With every proposal accepted a step yields k + 1 tokens, so
// (k + 1) / c(k) is the best speedup k proposals can give; with a mean
// accepted length a, the speedup is (1 + a) / c(k).
//
// Then end to end at batch 1 (worker/speculative_greedy.h, the one-sequence
// greedy loop over Model::Forward; not yet the engine): a prompt of `context`
// tokens, --replay-tokens greedy tokens without speculation, then with a
// ReplayProposer (speculative/replay_proposer.h) that proposes the known
// continuation, each token corrupted with probability p, k = --replay-k. It
// prints decode tokens/s against no speculation, the output's equality, and
// the speedup c(k) predicts for the steps taken: (tokens - 1) / sum over the
// steps of c(n), n the tokens each proposed, from this run's batch-1 rows
// (needs batch 1 and every k up to --replay-k in --ks). Then the same with a
// SpeculationPolicy (speculative/policy.h) choosing each step's k from those
// c(k). Not run in CI.
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/step_batch.h"
#include "bench/list_flag.h"
#include "comm/communicator.h"
#include "worker/kv_cache.h"
#include "worker/model.h"
#include "worker/speculative_greedy.h"
#include "speculative/replay_proposer.h"

namespace {

using namespace tpserve;


// The model engine_cpu_bench uses, generated the same way when missing.
bool EnsureModel(const std::filesystem::path& model) {
  if (std::filesystem::exists(model / "config.json")) return true;
  std::filesystem::create_directories(model.parent_path());
  struct statvfs fs {};
  if (statvfs(model.parent_path().c_str(), &fs) == 0 && fs.f_bavail * fs.f_frsize < (3ull << 30)) {
    std::fprintf(stderr, "spec_decode_bench: %s has less than 3 GB free; the model needs ~1.2 GB\n",
                 model.parent_path().c_str());
    return false;
  }
  const std::string cmd = std::string(TPSERVE_BINARY_DIR) + "/tools/make_model/tpserve-make-model " +
                          model.string() + " --preset qwen3-0.6b --dtype bf16 --seed 1";
  std::printf("generating %s (once)...\n", model.c_str());
  std::fflush(stdout);
  return std::system(cmd.c_str()) == 0;
}

// The step of `batch` sequences, each with `context` cached tokens and k + 1
// new ones, all of them logits rows; blocks of its own per sequence.
StepBatch MakeStep(int batch, int k, int context, int32_t block_size) {
  const int32_t blocks_per_seq = (context + k + 1 + block_size - 1) / block_size;
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(batch)), tables(static_cast<size_t>(batch));
  std::vector<StepSequence> seqs;
  for (int s = 0; s < batch; ++s) {
    for (int i = 0; i <= k; ++i) tokens[s].push_back(1000 + 37 * s + i);
    for (int b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
    seqs.push_back({tokens[s], context, tables[s], k + 1});
  }
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, block_size);
  if (!step.ok()) {
    std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(step.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(step);
}

double TimeForward(Model& model, KvCache& cache, const StepBatch& step) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::optional<Logits>> out = model.Forward(step.view(), cache);
  if (!out.ok()) {
    std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(out.status().message()).c_str());
    std::exit(1);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median seconds per k of the steps of `batch` sequences. The ks run in turn
// within each repetition, so a change in the machine's load reaches them
// all alike; repetition 0 warms up.
std::vector<double> TimeSteps(Model& model, KvCache& cache, int batch, const std::vector<int>& ks, int context,
                              int reps) {
  std::vector<StepBatch> steps;
  for (int k : ks) steps.push_back(MakeStep(batch, k, context, cache.block_size()));
  std::vector<std::vector<double>> times(ks.size());
  for (int r = 0; r <= reps; ++r) {
    for (size_t i = 0; i < ks.size(); ++i) {
      const double sec = TimeForward(model, cache, steps[i]);
      if (r > 0) times[i].push_back(sec);
    }
  }
  std::vector<double> median;
  for (std::vector<double>& t : times) {
    std::sort(t.begin(), t.end());
    median.push_back(t[t.size() / 2]);
  }
  return median;
}

// The end-to-end rows (see the top of the file).
void Replay(Model& model, KvCache& cache, int context, int tokens, int k, const std::vector<double>& ps,
            const std::vector<double>& cost) {
  std::vector<int32_t> prompt, table;
  for (int i = 0; i < context; ++i) prompt.push_back(1000 + (i * 7919) % 100000);
  for (int32_t b = 0; b < cache.num_blocks(); ++b) table.push_back(b);
  auto run = [&](speculative::Proposer* proposer, bool policy = false) {
    GreedyOptions options{.max_tokens = tokens, .num_speculative_tokens = k};
    if (policy) options.policy_cost = cost;
    absl::StatusOr<GreedyResult> r = GenerateGreedy(model, cache, prompt, table, options, proposer);
    if (!r.ok()) {
      std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(r.status().message()).c_str());
      std::exit(1);
    }
    return *std::move(r);
  };
  const GreedyResult plain = run(nullptr);
  const double plain_rate = (tokens - 1) / plain.decode_seconds;
  std::printf("\nend to end, batch 1, %d tokens after a %d-token prompt, replay proposer, k = %d\n", tokens, context, k);
  std::printf("%5s %7s %10s %12s %9s %10s %11s\n", "p", "steps", "acc/step", "decode tok/s", "speedup",
              "predicted", "same output");
  std::printf("%5s %7lld %10s %12.2f %9s %10s %11s\n", "off", static_cast<long long>(plain.steps), "-", plain_rate,
              "1.00", "-", "-");
  std::vector<int32_t> known = prompt;
  known.insert(known.end(), plain.tokens.begin(), plain.tokens.end());
  for (bool policy : {false, true}) {
    for (double p : ps) {
      speculative::ReplayProposer proposer(known, k, p, static_cast<int32_t>(model.config().vocab_size), 1);
      const GreedyResult r = run(&proposer, policy);
      const double rate = (tokens - 1) / r.decode_seconds;
      double steps_cost = 0;
      for (size_t n = 0; n < r.steps_by_proposed.size() && n < cost.size(); ++n) {
        steps_cost += static_cast<double>(r.steps_by_proposed[n]) * std::max(1.0, cost[n]);
      }
      const double predicted = (tokens - 1) / steps_cost;
      std::printf("%5.2f%s %7lld %10.2f %12.2f %9.2f %10s %11s\n", p, policy ? " +policy" : "",
                  static_cast<long long>(r.steps), static_cast<double>(r.accepted) / static_cast<double>(r.steps),
                  rate, rate / plain_rate, std::to_string(predicted).substr(0, 4).c_str(),
                  r.tokens == plain.tokens ? "yes" : "NO");
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_cache = std::getenv("TPSERVE_BENCH_CACHE");
  const char* home = std::getenv("HOME");
  std::filesystem::path cache_dir = env_cache != nullptr ? std::filesystem::path(env_cache)
                                                         : std::filesystem::path(home != nullptr ? home : "/tmp") /
                                                               ".cache/tpserve/bench";
  int context = 128, reps = 3, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> batches{1, 8, 64}, ks{0, 1, 2, 3, 4, 5, 6, 7, 8};
  int replay_tokens = 33, replay_k = 4;
  std::vector<double> replay_ps{0, 0.2, 0.5, 1};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--cache") cache_dir = value;
    else if (flag == "--context") context = std::stoi(value);
    else if (flag == "--batches") batches = tpserve::bench::ParseListFlag<int>(flag, value);
    else if (flag == "--ks") ks = tpserve::bench::ParseListFlag<int>(flag, value);
    else if (flag == "--replay-tokens") replay_tokens = std::stoi(value);
    else if (flag == "--replay-k") replay_k = std::stoi(value);
    else if (flag == "--replay-p") replay_ps = tpserve::bench::ParseListFlag<double>(flag, value);
    else if (flag == "--reps") reps = std::max(1, std::stoi(value));
    else if (flag == "--threads") threads = std::max(1, std::stoi(value));
    else {
      std::fprintf(stderr, "spec_decode_bench: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  if (std::find(ks.begin(), ks.end(), 0) == ks.end()) ks.insert(ks.begin(), 0);  // c(k) needs k = 0
  std::sort(ks.begin(), ks.end());
  const std::filesystem::path model_dir = cache_dir / "qwen3-0.6b-bf16";
  if (!EnsureModel(model_dir)) return 1;
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int max_k = ks.back();
  std::unique_ptr<Backend> backend = MakeCpuBackend(threads);
  std::unique_ptr<Communicator> comm = MakeSoloCommunicator();
  ModelOptions options{.max_num_tokens = int64_t{max_batch} * (max_k + 1), .max_num_seqs = max_batch,
                       .max_position = context + std::max(max_k, replay_k) + replay_tokens + 16,
                       .max_num_logits_rows = int64_t{max_batch} * (max_k + 1) + replay_k + 1};
  options.max_num_tokens = std::max<int64_t>(options.max_num_tokens, context);
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_dir, *backend, *comm, options);
  if (!model.ok()) {
    std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const int32_t block_size = 16;
  const int64_t num_blocks =
      std::max<int64_t>(int64_t{max_batch} * ((context + max_k + 1 + block_size - 1) / block_size),
                        (context + replay_tokens + replay_k + block_size - 1) / block_size);
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, (*model)->kv_cache_shape(num_blocks, block_size));
  if (!cache.ok()) {
    std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(cache.status().message()).c_str());
    return 1;
  }
  std::printf("spec_decode_bench: Qwen3-0.6B shape (random bf16 weights, computed in fp32), CPU backend, "
              "%d GEMM threads, context %d, median of %d\n", threads, context, reps);
  std::printf("%6s %3s %7s %10s %7s %14s\n", "batch", "k", "tokens", "ms/step", "c(k)", "(k+1)/c(k)");
  std::vector<double> cost;  // batch 1: c(0), c(1), ... while the ks run on from 0
  for (int batch : batches) {
    const std::vector<double> sec = TimeSteps(**model, *cache, batch, ks, context, reps);
    for (size_t i = 0; i < ks.size(); ++i) {
      std::printf("%6d %3d %7d %10.1f %7.2f %14.2f\n", batch, ks[i], batch * (ks[i] + 1), 1000 * sec[i],
                  sec[i] / sec[0], (ks[i] + 1) * sec[0] / sec[i]);
      if (batch == 1 && ks[i] == static_cast<int>(cost.size())) cost.push_back(sec[i] / sec[0]);
    }
    std::fflush(stdout);
  }
  if (replay_tokens > 1 && !replay_ps.empty() && static_cast<int>(cost.size()) > replay_k) {
    Replay(**model, *cache, context, replay_tokens, replay_k, replay_ps, cost);
  }
  return 0;
}
