// spec_decode_bench: the cost of speculative verification on the CPU backend.
// c(k) = the time of a step in which each of B decoding sequences carries its
// last token and k proposed ones (k + 1 query tokens at consecutive positions
// over the paged cache, k + 1 logits rows: backend/step.h), over the time of
// the one-token decode step (k = 0) of the same B sequences.
//
//   spec_decode_bench [--cache DIR] [--context 128] [--batches 1,8,64] [--ks 0,1,2,3,4,5,6,7,8]
//                     [--reps 3] [--threads N]
//
// The Qwen3-0.6B-shaped model (random bf16 weights computed in fp32) is the one
// engine_cpu_bench generates into DIR (default $TPSERVE_BENCH_CACHE, else
// ~/.cache/tpserve/bench), made here the same way if missing. The forward is
// Model::Forward (worker/model.h) as the step runner calls it, logits copied
// to the host included; each sequence has `context` tokens in the cache
// (zero-filled K/V: attention reads and computes over them as over real ones)
// and blocks of its own. A step's time is the median of --reps runs after one
// warm-up. With every proposal accepted a step yields k + 1 tokens, so
// (k + 1) / c(k) is the best speedup k proposals can give; with a mean
// accepted length a, the speedup is (1 + a) / c(k). Not run in CI.
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/step_batch.h"
#include "comm/communicator.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace {

using namespace tpserve;

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

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

// Median seconds of Model::Forward on a step of `batch` sequences, each with
// `context` cached tokens and k + 1 new ones, all of them logits rows.
double TimeStep(Model& model, KvCache& cache, int batch, int k, int context, int reps) {
  const int32_t bs = cache.block_size();
  const int32_t blocks_per_seq = (context + k + 1 + bs - 1) / bs;
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(batch)), tables(static_cast<size_t>(batch));
  std::vector<StepSequence> seqs;
  for (int s = 0; s < batch; ++s) {
    for (int i = 0; i <= k; ++i) tokens[s].push_back(1000 + 37 * s + i);
    for (int b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
    seqs.push_back({tokens[s], context, tables[s], k + 1});
  }
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, bs);
  if (!step.ok()) {
    std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(step.status().message()).c_str());
    std::exit(1);
  }
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::optional<Logits>> out = model.Forward(step->view(), cache);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!out.ok()) {
      std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(out.status().message()).c_str());
      std::exit(1);
    }
    if (r > 0) times.push_back(sec);  // run 0 warms up
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
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
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--cache") cache_dir = value;
    else if (flag == "--context") context = std::stoi(value);
    else if (flag == "--batches") batches = ParseList(value);
    else if (flag == "--ks") ks = ParseList(value);
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
                       .max_position = context + max_k + 16, .max_num_logits_rows = int64_t{max_batch} * (max_k + 1)};
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_dir, *backend, *comm, options);
  if (!model.ok()) {
    std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const int32_t block_size = 16;
  const int64_t num_blocks = int64_t{max_batch} * ((context + max_k + 1 + block_size - 1) / block_size);
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, (*model)->kv_cache_shape(num_blocks, block_size));
  if (!cache.ok()) {
    std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(cache.status().message()).c_str());
    return 1;
  }
  std::printf("spec_decode_bench: Qwen3-0.6B shape (random bf16 weights, computed in fp32), CPU backend, "
              "%d GEMM threads, context %d, median of %d\n", threads, context, reps);
  std::printf("%6s %3s %7s %10s %7s %14s\n", "batch", "k", "tokens", "ms/step", "c(k)", "(k+1)/c(k)");
  for (int batch : batches) {
    double base = 0;
    for (int k : ks) {
      const double sec = TimeStep(**model, *cache, batch, k, context, reps);
      if (k == 0) base = sec;
      std::printf("%6d %3d %7d %10.1f %7.2f %14.2f\n", batch, k, batch * (k + 1), 1000 * sec, sec / base,
                  (k + 1) * base / sec);
      std::fflush(stdout);
    }
  }
  return 0;
}
