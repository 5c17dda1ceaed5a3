// engine_cpu_bench: CPU prefill and decode throughput of the offline engine at
// tp = 1 and 2 on a Qwen3-0.6B-shaped model with random weights.
//
//   engine_cpu_bench [--cache DIR] [--prompt-len 128] [--steps 16] [--batches 1,8] [--tps 1,2]
//
// The model (tpserve-make-model --preset qwen3-0.6b --dtype bf16, ~1.2 GB) is
// generated once into DIR (default $TPSERVE_BENCH_CACHE, else
// ~/.cache/tpserve/bench). Each configuration runs tpserve-generate (the
// offline engine: the serving scheduler of scheduler/ and the workers' step
// runner, worker/engine.h), which times its steps: "prefill" is the step that
// computes the prompts (batch x prompt-len tokens), "decode" the following
// steps of one token per sequence.
// Each rank gets cores / tp GEMM threads. Not run in CI.
#include <sys/statvfs.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/list_flag.h"
#include "nlohmann/json.hpp"

namespace {

std::string Tool(const char* rel) { return std::string(TPSERVE_BINARY_DIR) + "/tools/" + rel; }


int Run(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_cache = std::getenv("TPSERVE_BENCH_CACHE");
  const char* home = std::getenv("HOME");
  std::filesystem::path cache = env_cache != nullptr ? std::filesystem::path(env_cache)
                                                     : std::filesystem::path(home != nullptr ? home : "/tmp") /
                                                           ".cache/tpserve/bench";
  int prompt_len = 128, steps = 16;
  std::vector<int> batches{1, 8}, tps{1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--cache") cache = value;
    else if (flag == "--prompt-len") prompt_len = std::stoi(value);
    else if (flag == "--steps") steps = std::stoi(value);
    else if (flag == "--batches") batches = tpserve::bench::ParseListFlag<int>(flag, value);
    else if (flag == "--tps") tps = tpserve::bench::ParseListFlag<int>(flag, value);
    else {
      std::fprintf(stderr, "engine_cpu_bench: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  const std::filesystem::path model = cache / "qwen3-0.6b-bf16";
  if (!std::filesystem::exists(model / "config.json")) {
    std::filesystem::create_directories(cache);
    struct statvfs fs {};
    if (statvfs(cache.c_str(), &fs) == 0 && fs.f_bavail * fs.f_frsize < (3ull << 30)) {
      std::fprintf(stderr, "engine_cpu_bench: %s has less than 3 GB free; the model needs ~1.2 GB. "
                   "Point --cache or TPSERVE_BENCH_CACHE elsewhere.\n", cache.c_str());
      return 1;
    }
    std::printf("generating %s (once)...\n", model.c_str());
    std::fflush(stdout);
    const std::string cmd = Tool("make_model/tpserve-make-model") + " " + model.string() +
                            " --preset qwen3-0.6b --dtype bf16 --seed 1";
    if (Run(cmd) != 0) {
      std::fprintf(stderr, "engine_cpu_bench: %s failed\n", cmd.c_str());
      return 1;
    }
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::mt19937 rng(1);
  std::string prompt;
  for (int i = 0; i < prompt_len; ++i) prompt += (i ? "," : "") + std::to_string(1000 + rng() % 100000);

  std::printf("engine_cpu_bench: Qwen3-0.6B shape (random bf16 weights, computed in fp32), %u cores, "
              "prompt %d tokens, %d decode steps\n", cores, prompt_len, steps);
  std::printf("%4s %6s %8s %16s %16s %12s\n", "tp", "batch", "threads", "prefill tok/s", "decode tok/s",
              "decode ms/step");
  const std::filesystem::path out = cache / "engine_cpu_bench.json";
  for (int tp : tps) {
    for (int batch : batches) {
      const int threads = std::max(1, static_cast<int>(cores) / tp);
      const std::string cmd = Tool("engine_cli/tpserve-generate") + " --model " + model.string() + " --tp " +
                              std::to_string(tp) + " --threads " + std::to_string(threads) + " --prompt-ids " +
                              prompt + " --batch " + std::to_string(batch) + " --max-tokens " +
                              std::to_string(steps + 1) + " --ignore-eos --max-position " +
                              std::to_string(prompt_len + steps + 16) + " --max-num-tokens " +
                              std::to_string(batch * prompt_len) + " --output-json " + out.string() +
                              " >/dev/null 2>&1";
      if (Run(cmd) != 0) {
        std::fprintf(stderr, "engine_cpu_bench: failed: %s\n", cmd.c_str());
        return 1;
      }
      nlohmann::json j;
      std::ifstream(out) >> j;
      const auto& st = j["stats"];
      const double pt = st["prefill_tokens"].get<double>(), ps = st["prefill_seconds"].get<double>();
      const double dt = st["decode_tokens"].get<double>(), ds = st["decode_seconds"].get<double>();
      std::printf("%4d %6d %8d %16.1f %16.1f %12.1f\n", tp, batch, threads, pt / ps, dt / ds,
                  1000.0 * ds / std::max(1.0, dt / batch));
      std::fflush(stdout);
    }
  }
  return 0;
}
