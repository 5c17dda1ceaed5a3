// parallel_sampling_bench: one request of n choices (parallel sampling on
// shared KV blocks, scheduler/scheduler.h) against n separate requests with
// the same prompt, through the offline engine on the CPU backend (the serving
// scheduler and the workers' step runner, worker/engine.h). Prints, for each:
// prompt tokens computed, the most KV blocks held at once, and the wall time
// to the last token (best of --reps, each on a fresh engine and cache). The
// separate requests run without and with the prefix cache (with it, those
// admitted after the first prompt's blocks are registered reuse them). The
// seeded choices and the separate requests seeded seed + i give the same
// tokens; the bench checks it.
//
//   parallel_sampling_bench [--prompt-len 2000] [--n 8] [--max-tokens 32] [--threads 2] [--reps 2]
//
// The model is small (tpserve-make-model: hidden 256, 4 layers, vocab 4096,
// f32), generated into a temporary folder: the point is the work the
// scheduler avoids, not a model's speed. Not run in CI.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "comm/communicator.h"
#include "scheduler/step_plan.h"
#include "worker/engine.h"

namespace tpserve {
namespace {

struct Measured {
  GenerationStats stats;
  double seconds = 0;
  std::vector<std::vector<int32_t>> tokens;
};

Measured RunOnce(const std::filesystem::path& model, Backend& backend, Communicator& comm,
                 const std::vector<GenerationRequest>& requests, int32_t max_seqs, bool prefix_caching) {
  EngineOptions options;
  options.enable_prefix_caching = prefix_caching;
  options.model.max_num_tokens = 2048;
  options.model.max_num_seqs = max_seqs;
  options.block_size = 16;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(model, backend, comm, options);
  if (!engine.ok()) {
    std::fprintf(stderr, "parallel_sampling_bench: %s\n", std::string(engine.status().message()).c_str());
    std::exit(1);
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<GenerationResult>> out = (*engine)->Generate(requests);
  Measured m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!out.ok()) {
    std::fprintf(stderr, "parallel_sampling_bench: %s\n", std::string(out.status().message()).c_str());
    std::exit(1);
  }
  m.stats = (*engine)->last_stats();
  for (const GenerationResult& r : *out) m.tokens.push_back(r.tokens);
  return m;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  using namespace tpserve;
  int prompt_len = 2000, n = 8, max_tokens = 32, threads = 2, reps = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--prompt-len") prompt_len = value;
    else if (flag == "--n") n = value;
    else if (flag == "--max-tokens") max_tokens = value;
    else if (flag == "--threads") threads = value;
    else if (flag == "--reps") reps = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tpserve-parallel-sampling-bench";
  const std::string cmd = std::string(TPSERVE_BINARY_DIR) + "/tools/make_model/tpserve-make-model " + dir.string() +
                          " --arch qwen3 --hidden 256 --intermediate 768 --layers 4 --heads 4 --kv-heads 2"
                          " --head-dim 64 --vocab 4096 --dtype f32 --tie 0 --seed 3 --max-pos 8192 > /dev/null";
  if (std::system(cmd.c_str()) != 0) return 1;
  std::unique_ptr<Backend> backend = MakeCpuBackend(threads);
  std::unique_ptr<Communicator> comm = MakeSoloCommunicator();

  GenerationRequest one;
  for (int i = 0; i < prompt_len; ++i) one.prompt.push_back((i * 7919 + 13) % 4096);
  one.sampling.temperature = 1.0f;
  one.sampling.seed = 7;
  one.max_tokens = max_tokens;
  one.ignore_eos = true;
  one.n = n;
  std::vector<GenerationRequest> separate;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r = one;
    r.n = 1;
    r.sampling = ChoiceSampling(one.sampling, i);
    separate.push_back(r);
  }
  constexpr int kRuns = 3;
  const char* names[kRuns] = {"separate, no prefix cache", "separate, prefix cache", "one request, n choices"};
  Measured best[kRuns];
  for (int rep = 0; rep < reps; ++rep) {
    for (int which = 0; which < kRuns; ++which) {
      Measured m = which < 2 ? RunOnce(dir, *backend, *comm, separate, n, /*prefix_caching=*/which == 1)
                             : RunOnce(dir, *backend, *comm, {one}, n, /*prefix_caching=*/true);
      if (rep == 0 || m.seconds < best[which].seconds) best[which] = std::move(m);
    }
  }
  std::printf("prompt %d tokens, %d choices of %d tokens, block size 16, %d GEMM threads, best of %d\n", prompt_len,
              n, max_tokens, threads, reps);
  std::printf("%-27s %14s %12s %13s\n", "", "prompt tokens", "peak blocks", "last token s");
  for (int which = 0; which < kRuns; ++which) {
    std::printf("%-27s %14lld %12lld %13.3f\n", names[which],
                static_cast<long long>(best[which].stats.prompt_tokens_computed),
                static_cast<long long>(best[which].stats.peak_blocks_used), best[which].seconds);
  }
  const Measured& choices = best[kRuns - 1];
  for (int which = 0; which + 1 < kRuns; ++which) {
    std::printf("%-27s %13.2fx %11.3fx %12.2fx\n", (std::string(names[which]).substr(0, 22) + " / n").c_str(),
                static_cast<double>(best[which].stats.prompt_tokens_computed) / choices.stats.prompt_tokens_computed,
                static_cast<double>(choices.stats.peak_blocks_used) / best[which].stats.peak_blocks_used,
                best[which].seconds / choices.seconds);
  }
  std::printf("(columns: prompt tokens separate / n, peak blocks n / separate, time separate / n)\n");
  const bool same = best[0].tokens == choices.tokens && best[1].tokens == choices.tokens;
  std::printf("same tokens: %s\n", same ? "yes" : "NO");
  std::filesystem::remove_all(dir);
  return same ? 0 : 1;
}
