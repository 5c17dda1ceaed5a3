// GPU benchmark (issue 5): random weights with the real Qwen3-0.6B and
// Llama-3.2-1B shapes (tpserve-make-model presets), bf16, tp = 1, each number
// next to a floor measured in the same run:
//   * decode ms/step at batch 1, 8, 64, 256 with a 512-token context, against
//     (weight bytes + KV bytes read) / device-to-device copy bandwidth;
//   * prefill tokens/s for 1 × 1024 and 16 × 512 prompts, against the TFLOP/s of
//     a large cuBLAS bf16 GEMM (2 · params · tokens FLOPs, attention excluded);
//   * decode attention alone at batch 64 with a 1K context (Qwen3-0.6B's
//     attention geometry) as a share of the copy bandwidth.
// Prints a table and writes it to --out (default bench/results/gpu_bench.md).
//
//   gpu_bench [--models qwen3-0.6b,llama-3.2-1b] [--out FILE] [--workdir DIR]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "comm/communicator.h"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "tools/make_model/make_model.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve {
namespace {

constexpr int32_t kBlockSize = 16;

// Seconds per call of fn, timed with events on the legacy stream after warm-up
// (the backend's stream is a blocking stream, so it is ordered with it).
template <typename Fn>
double TimeIt(Fn&& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  CUDA_CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Bytes per second of cudaMemcpy device to device, counting read + write.
double CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  const double s = TimeIt([&] { CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 2, 10);
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  return 2.0 * bytes / s;
}

// FLOP/s of an 8192³ bf16 GEMM with fp32 accumulation.
double GemmFlops() {
  const int n = 8192;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  const size_t bytes = size_t{n} * n * 2;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  CUDA_CHECK(cudaMalloc(&c, bytes));
  CUDA_CHECK(cudaMemset(a, 0, bytes));
  CUDA_CHECK(cudaMemset(b, 0, bytes));
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  const float one = 1, zero = 0;
  const double s = TimeIt([&] {
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                              &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }, 2, 10);
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * n * n / s;
}

// A step of `num_seqs` sequences with `new_tokens` new tokens each ending at
// position seq_len − 1; sequence s owns blocks [s · blocks_per_seq, ...).
struct BenchStep {
  std::vector<int32_t> ids, positions, query_start{0}, seq_lens, tables, logits_indices;
  std::vector<int64_t> slots;
  StepMetadata meta;
  BenchStep(int32_t num_seqs, int32_t new_tokens, int32_t seq_len) {
    const int32_t blocks_per_seq = (seq_len + kBlockSize - 1) / kBlockSize;
    for (int32_t s = 0; s < num_seqs; ++s) {
      for (int32_t pos = seq_len - new_tokens; pos < seq_len; ++pos) {
        ids.push_back((s * 7919 + pos * 31) % 30000);
        positions.push_back(pos);
        slots.push_back(int64_t{s * blocks_per_seq + pos / kBlockSize} * kBlockSize + pos % kBlockSize);
      }
      query_start.push_back(static_cast<int32_t>(ids.size()));
      seq_lens.push_back(seq_len);
      for (int32_t b = 0; b < blocks_per_seq; ++b) tables.push_back(s * blocks_per_seq + b);
      logits_indices.push_back(query_start.back() - 1);
    }
    (new_tokens == 1 ? meta.num_decode_seqs : meta.num_prefill_seqs) = num_seqs;
    meta.token_ids = ids;
    meta.positions = positions;
    meta.slot_mapping = slots;
    meta.query_start = query_start;
    meta.seq_lens = seq_lens;
    meta.block_tables = tables;
    meta.max_blocks_per_seq = blocks_per_seq;
    meta.logits_indices = logits_indices;
  }
};

int64_t DirBytes(const std::filesystem::path& dir, const std::string& ext) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ext) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

int Run(int argc, char** argv) {
  std::string models = "qwen3-0.6b,llama-3.2-1b", out_path = "bench/results/gpu_bench.md";
  std::filesystem::path workdir = std::filesystem::temp_directory_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--models") models = argv[i + 1];
    else if (k == "--out") out_path = argv[i + 1];
    else if (k == "--workdir") workdir = argv[i + 1];
    else { std::fprintf(stderr, "unknown option %s; see the comment at the top of gpu_bench.cc\n", k.c_str()); return 2; }
  }
  if (cuda::DeviceCount() == 0) {
    std::fprintf(stderr, "gpu_bench: no CUDA device present; run it on a machine with a GPU\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::ostringstream table;
  const double bw = CopyBandwidth(), flops = GemmFlops();
  table << "# tpserve GPU benchmark on " << prop.name << "\n\n"
        << "copy bandwidth (cudaMemcpy D2D, read+write): " << bw / 1e9 << " GB/s\n"
        << "bf16 GEMM 8192^3 (cuBLAS): " << flops / 1e12 << " TFLOP/s\n\n"
        << "| model | case | measured | floor | share of floor |\n|---|---|---|---|---|\n";

  for (absl::string_view preset : absl::StrSplit(models, ',', absl::SkipEmpty())) {
    const std::filesystem::path dir = workdir / ("tpserve_gpu_bench_" + std::string(preset));
    std::vector<std::string> args{dir.string(), "--preset", std::string(preset), "--seed", "1"};
    absl::StatusOr<make_model::MakeModelOptions> mo = make_model::ParseArgs(args);
    if (!mo.ok() || !make_model::MakeModel(*mo).ok()) {
      std::fprintf(stderr, "gpu_bench: could not write the %s model to %s\n", std::string(preset).c_str(), dir.c_str());
      return 1;
    }
    const int64_t weight_bytes = DirBytes(dir, ".safetensors");
    std::unique_ptr<Backend> backend = MakeCudaBackend(0);
    std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
    ModelOptions options;
    options.max_num_tokens = 8192;
    options.max_num_seqs = 256;
    options.max_position = 2048;
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir, *backend, *solo, options);
    if (!model.ok()) {
      std::fprintf(stderr, "gpu_bench: %s\n", model.status().ToString().c_str());
      return 1;
    }
    Model& m = **model;
    const ModelConfig& c = m.config();
    absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, m.kv_cache_shape(256 * 32 + 64, kBlockSize));
    if (!cache.ok()) {
      std::fprintf(stderr, "gpu_bench: %s\n", cache.status().ToString().c_str());
      return 1;
    }
    const int64_t kv_bytes_per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 2;
    const std::string name(preset);
    for (int32_t batch : {1, 8, 64, 256}) {
      BenchStep step(batch, 1, 512);
      const double s = TimeIt([&] { (void)m.Forward(step.meta, *cache); }, 3, 20);
      const double floor = (weight_bytes + double(batch) * 512 * kv_bytes_per_token) / bw;
      char line[256];
      std::snprintf(line, sizeof line, "| %s | decode batch %d, ctx 512 | %.3f ms/step | %.3f ms | %.0f%% |\n",
                    name.c_str(), batch, s * 1e3, floor * 1e3, 100 * floor / s);
      table << line;
    }
    const int64_t params = weight_bytes / 2;
    for (auto [seqs, len] : {std::pair{1, 1024}, std::pair{16, 512}}) {
      BenchStep step(seqs, len, len);
      const double s = TimeIt([&] { (void)m.Forward(step.meta, *cache); }, 1, 5);
      const double tokens = double(seqs) * len;
      const double floor_tps = flops / (2.0 * params);
      char line[256];
      std::snprintf(line, sizeof line, "| %s | prefill %d x %d | %.0f tok/s | %.0f tok/s | %.0f%% |\n", name.c_str(),
                    seqs, len, tokens / s, floor_tps, 100 * (tokens / s) / floor_tps);
      table << line;
    }
    if (preset == "qwen3-0.6b") {  // decode attention alone: batch 64, 1K context
      const AttentionShape shape = m.attention_shape();
      BenchStep step(64, 1, 1024);
      if (!backend->BeginStep(step.meta, cache->num_blocks(), kBlockSize, m.max_position()).ok()) return 1;
      Buffer qkv = backend->Allocate(DType::kBF16, {64, shape.qkv_width()});
      Buffer out = backend->Allocate(DType::kBF16, {64, int64_t{shape.num_heads} * shape.head_dim});
      const KvCacheLayer layer = cache->layer(0);
      const double s = TimeIt([&] {
        backend->Attention(qkv, shape, layer, 0.088f, out.tensor());
      }, 3, 50);
      const double bytes = 64.0 * 1024 * 2 * shape.num_kv_heads * shape.head_dim * 2;
      char line[256];
      std::snprintf(line, sizeof line, "| %s | decode attention batch 64, ctx 1024 | %.1f GB/s (%.1f us) | %.1f GB/s | %.0f%% |\n",
                    name.c_str(), bytes / s / 1e9, s * 1e6, bw / 1e9, 100 * bytes / s / bw);
      table << line;
    }
    model->reset();
    std::filesystem::remove_all(dir);
  }
  std::printf("%s", table.str().c_str());
  std::filesystem::create_directories(std::filesystem::path(out_path).parent_path());
  std::ofstream(out_path) << table.str();
  std::printf("\nwritten to %s\n", out_path.c_str());
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Run(argc, argv); }
