// cpu_gemm_bench: the CPU GEMM (backend/cpu_gemm.h) at each number of rows M,
// on the four GEMMs of a Qwen3-0.6B layer (w [N, K]: QKV 4096 x 1024, o_proj
// 1024 x 2048, gate/up 6144 x 1024, down 1024 x 3072) over --layers layers'
// own weights (default 16, ~1 GB: more than the caches, so they come from
// memory as in a model's step).
//
//   cpu_gemm_bench [--ms 1,8,16,...] [--reps 5] [--layers 16] [--threads N] [--kernel avx2]
//
// Prints, per M, the median ms of a pass over every layer and that over the
// first M's pass (with --ms 8,...: the cost of M rows in batch-8 decode steps,
// the c(k) of bench/spec_decode_bench without attention and the LM head). The
// Ms take turns within each repetition, so a change in a shared machine's
// load reaches them alike; repetition 0 warms up. --kernel: portable, avx2 or
// avx512 instead of the widest this CPU has. Not run in CI.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu_gemm.h"
#include "bench/list_flag.h"

namespace {

using namespace tpserve;

struct Shape {
  int64_t n, k;
};
constexpr Shape kLayer[] = {{4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}};


// Values in [-1, 1) from a 64-bit LCG (the bits do not matter, only that
// they are not zeros).
std::vector<float> Filled(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(static_cast<int64_t>(s >> 40) - (int64_t{1} << 23)) / static_cast<float>(1 << 23);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> ms{1, 8, 16, 24, 32, 33, 40, 48, 56, 64, 72, 80, 96, 128, 129, 256};
  int reps = 5, layers = 16, num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CpuGemmKernel kernel = CpuGemmSelected();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--ms") ms = tpserve::bench::ParseListFlag<int64_t>(flag, value);
    else if (flag == "--reps") reps = std::stoi(value);
    else if (flag == "--layers") layers = std::stoi(value);
    else if (flag == "--threads") num_threads = std::stoi(value);
    else if (flag == "--kernel") {
      kernel = value == "portable" ? CpuGemmKernel::kPortable
               : value == "avx2"   ? CpuGemmKernel::kAvx2
                                   : CpuGemmKernel::kAvx512;
      if (!CpuGemmSupported(kernel)) {
        std::fprintf(stderr, "cpu_gemm_bench: no %s kernel on this CPU\n", value.c_str());
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "cpu_gemm_bench: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  std::vector<std::vector<float>> w;  // [layers · 4] weights, each [N, K]
  for (int l = 0; l < layers; ++l) {
    for (const Shape& s : kLayer) w.push_back(Filled(s.n * s.k, w.size() + 1));
  }
  const std::vector<float> x = Filled(max_m * 3072, 0);  // [max_m, the largest K]
  std::vector<float> y(static_cast<size_t>(max_m * 6144));  // [max_m, the largest N]
  CpuGemmThreads threads(num_threads);

  std::vector<std::vector<double>> times(ms.size());
  for (int r = 0; r <= reps; ++r) {
    for (size_t i = 0; i < ms.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t g = 0; g < w.size(); ++g) {
        const Shape& s = kLayer[g % 4];
        CpuGemmWith(kernel, x.data(), w[g].data(), nullptr, y.data(), ms[i], s.n, s.k, &threads);
      }
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) times[i].push_back(sec);
    }
  }
  std::printf("cpu_gemm_bench: %s kernel, %d threads, %d layers of the Qwen3-0.6B shape, median of %d\n",
              CpuGemmKernelName(kernel), num_threads, layers, reps);
  std::printf("%6s %10s %12s %12s\n", "M", "ms/pass", "vs first M", "us/row");
  double first = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    std::sort(times[i].begin(), times[i].end());
    const double med = times[i][times[i].size() / 2];
    if (i == 0) first = med;
    std::printf("%6lld %10.1f %12.2f %12.1f\n", static_cast<long long>(ms[i]), 1e3 * med, med / first,
                1e6 * med / static_cast<double>(ms[i]));
  }
  return 0;
}
