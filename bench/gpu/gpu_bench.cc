// GPU benchmark (issue 5): random weights with the real Qwen3-0.6B and
// Llama-3.2-1B shapes (tpserve-make-model presets), bf16, tp = 1, each number
// next to a floor measured in the same run:
//   * decode ms/step at batch 1, 8, 64, 256 with a 512-token prompt (and, for
//     the ratio, batch 1 and 64 on the reference kernel set, batch 1 and 8
//     on the fast set with programmatic dependent launch off, and batch 1 and
//     8 with the GPU sampler eager after the forward's graph instead of its
//     own decode-batch graph), timed
//     the way the server runs it: the offline Engine's step runner (the
//     serving scheduler's steps, decode steps replayed as CUDA graphs, tokens
//     sampled on the GPU at temperature 0.6, no logits read back), against
//     (weight bytes + KV bytes read) / device-to-device copy bandwidth;
//   * prefill tokens/s for 1 × 1024 and 16 × 512 prompts, against the TFLOP/s of
//     a large cuBLAS bf16 GEMM (2 · params · tokens FLOPs, attention excluded);
//   * a batch-1 verification step (speculative decoding: the last token and
//     k = 1, 4, 8 proposals at the decode prompt's context) replayed from its
//     CUDA graph beside the same step eager, and its cost against the graph's
//     one-token decode step (c(k)); the same at batch 8 (k = 4 each, and
//     mixed k), against the graph's batch-8 decode step; before them, what
//     capturing those graphs took (ms per graph, device memory);
//   * decode attention alone at batch 64 with a 1K context (Qwen3-0.6B's
//     attention geometry) as a share of the copy bandwidth;
//   * decode attention, the fast kernel (cuda/decode_attention.cuh) beside the
//     reference kernels (split flash-decoding after Reserve, and the single
//     kernel), at contexts 512 .. 32768 and batch 1, 8, 64, 256 (Qwen3-0.6B's
//     attention geometry, one layer), as KV GB/s and a share of the copy
//     bandwidth;
//   * decode attention at GQA groups 4 and 8 (Hq 8 and 16 over Hkv 2, hd 128:
//     Llama-3-8B's and -70B's attention at tp 4) at batch 64, contexts 1024 ..
//     32768: the fast kernel's tensor-core variant, its SIMT variant forced,
//     and the reference split kernel, launched directly, as a share of the
//     copy bandwidth;
//   * Linear at M = 1, 2, 4, 8 on Qwen3-0.6B's projections (qkv 1024 -> 4096,
//     o 2048 -> 1024, gate_up 1024 -> 6144, down 3072 -> 1024): the fast
//     set's GEMV (cuda/gemv.cuh) beside cuBLAS (the reference set), as weight
//     bytes read per second and a share of the copy bandwidth; and the MLP's
//     gate/up projection with its SiLU-and-mul at M = 1, 2, 4, 8 on
//     Qwen3-0.6B's (1024 -> 2 x 3072) and Llama-3.2-1B's (2048 -> 2 x 8192)
//     shapes: the fused GEMV (Backend::LinearSiluMul) beside the GEMV then
//     SiluMul, both on the fast set;
//   * prefill attention of one prompt (512, 2048, 8192 tokens; Qwen3-0.6B's
//     attention geometry, one layer): the tensor-core kernel (fast kernel
//     set) against the reference kernel, in causal attention TFLOP/s; and the
//     same prompts in mixed steps beside 64 decodes of 1024 keys (both sets
//     after Reserve: the fast set's prompt rows through the tensor-core
//     kernel, its decode rows through the fast decode kernel), in ms;
//   * the GPU sampler at batch 1, 8, 64, vocabulary 151,936, temperature 0.6 +
//     top-p 0.9 (issue 12's target: <= 15 us at batch 1 on an H200): the
//     sliced kernels (fast set, cuda/sampling_sliced.cuh) against the
//     one-block-per-row kernel (reference set), launched eagerly and replayed
//     as a CUDA graph, and CudaSampler::Sample's whole call (upload, kernels,
//     read-back), eagerly and through its decode-batch graph;
//   * a decoder layer in fewer launches (Backend::FusesLayerOps): the fused
//     ops beside the unfused fast ops they replace, at M = 1, 2, 4, 8 on
//     Qwen3-0.6B's layer, eagerly and as graphs (kernel_sections.cc,
//     FusionSection); and the served decode rows at batch 1 and 8 with the
//     fused layers off;
//   * deterministic mode (cuda/cuda_backend.h; issue 28's target: at most 15%
//     slower than the fast set at batch 64): the batch-invariant GEMM beside
//     the GEMV / cuBLAS at M = 1, 8, 64, 256 and its attention beside the fast
//     kernels (deterministic_section.cc), and the served decode rows at batch
//     1 and 64 in deterministic mode (its one-block-per-row sampler
//     included), with the batch-64 cost against the fast rows;
//   * one eager batch-1 decode step of the first model op by op, each op
//     between two CUDA events, next to the same step replayed as a graph
//     (profile_section.cc): the per-kernel profile without a profiler;
//   * offline throughput (nano-vllm's bench.py workload) through the Engine on
//     the Qwen3-0.6B-shaped model: 256 sequences, random prompt lengths
//     100..1024 and output lengths 100..1024 (seeded), EOS ignored, sampled at
//     temperature 0.6: output tokens/s;
//   * last, issue 12's four targets (bench_util.h's Target) with the worst
//     value recorded for each and whether it is met.
// Prints the tables and writes them to --out (default
// bench/results/gpu_bench.md) after every section, so a run cut short by a
// time limit still leaves what it measured.
//
//   gpu_bench [--models qwen3-0.6b,llama-3.2-1b] [--out FILE] [--workdir DIR]
//             [--sections gemv,fusion,attention,prefill-attention,sampler,deterministic,models,profile,throughput]
//             [--throughput-seqs 256] [--smoke]
// (sections run in that order; the throughput run is the longest, so last).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backend/step_batch.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "bench/gpu/bench_util.h"
#include "comm/communicator.h"
#include "cuda/attention.cuh"
#include "cuda/decode_attention.cuh"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#include "cuda/kernel_set.h"
#include "cuda/sampling.cuh"
#include "cuda/sampling_sliced.cuh"
#include "model/config.h"
#include "model/dtype.h"
#include "sampling/sampler.h"
#include "tools/make_model/make_model.h"
#include "worker/decode_graphs.h"
#include "worker/engine.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve {
namespace {

using gpu_bench::AttentionSplitSection;
using gpu_bench::AttentionVariantSection;
using gpu_bench::BenchStep;
using gpu_bench::GemvSection;
using gpu_bench::PrefillAttentionSection;
using gpu_bench::SamplerSection;
using gpu_bench::kBlockSize;
using gpu_bench::RecordTarget;
using gpu_bench::Sizes;
using gpu_bench::Target;
using gpu_bench::TargetsTable;
using gpu_bench::TimeIt;


// A random-weight model of the smoke run (`--models tiny`).
constexpr const char* kTinyModelArgs =
    "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --vocab 301 "
    "--dtype bf16";

// Bytes per second of cudaMemcpy device to device, counting read + write.
double CopyBandwidth(size_t bytes) {
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  const double s = TimeIt([&] { CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 2, 10);
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  return 2.0 * bytes / s;
}

// FLOP/s of an 8192³ bf16 GEMM with fp32 accumulation.
double GemmFlops(int n) {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(n) * 2;
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

int64_t DirBytes(const std::filesystem::path& dir, const std::string& ext) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ext) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

// Writes a random-weight model of `preset` under workdir (over what an
// interrupted run may have left there).
absl::StatusOr<std::filesystem::path> PresetModel(const std::filesystem::path& workdir, const std::string& preset) {
  const std::filesystem::path dir = workdir / ("tpserve_gpu_bench_" + preset);
  std::filesystem::remove_all(dir);
  std::vector<std::string> args{dir.string(), "--seed", "1"};
  if (preset == "tiny") {
    for (absl::string_view a : absl::StrSplit(kTinyModelArgs, ' ', absl::SkipEmpty())) args.emplace_back(a);
  } else {
    args.insert(args.end(), {"--preset", preset});
  }
  absl::StatusOr<make_model::MakeModelOptions> mo = make_model::ParseArgs(args);
  if (!mo.ok()) return mo.status();
  if (absl::Status st = make_model::MakeModel(*mo); !st.ok()) return st;
  return dir;
}

// An Engine on `backend` as tpserve-worker rank 0 runs one: tp = 1, decode
// steps as CUDA graphs, sampling on the GPU; blocks of kBlockSize.
struct ServingEngine {
  std::unique_ptr<cuda::CudaSampler> sampler;
  std::unique_ptr<Engine> engine;
};
absl::StatusOr<ServingEngine> MakeServingEngine(const Sizes& z, const std::filesystem::path& model_dir,
                                                Backend& backend, Communicator& solo, int64_t max_position,
                                                int64_t num_blocks, int64_t max_num_tokens = 8192,
                                                bool sampler_graphs = true,
                                                cuda::KernelSet sampler_kernels = cuda::KernelSet::kFast) {
  EngineOptions options;
  options.model.max_num_tokens = max_num_tokens;
  options.model.max_num_seqs = z.max_num_seqs;
  options.model.max_position = max_position;
  options.block_size = kBlockSize;
  options.num_blocks = num_blocks;  // allocated (and the graphs captured) once, at the first Generate
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model_dir);
  if (!config.ok()) return config.status();
  cuda::CudaSampler::Options sampling;
  sampling.max_seqs = static_cast<int32_t>(options.model.max_num_seqs);
  sampling.vocab_size = config->vocab_size;
  sampling.batch_graphs = sampler_graphs;
  sampling.kernels = sampler_kernels;
  ServingEngine out;
  absl::StatusOr<std::unique_ptr<cuda::CudaSampler>> sampler =
      cuda::CudaSampler::Create(sampling, static_cast<cudaStream_t>(backend.stream()));
  if (!sampler.ok()) return sampler.status();
  out.sampler = *std::move(sampler);
  options.sampler = out.sampler.get();
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(model_dir, backend, solo, options);
  if (!engine.ok()) return engine.status();
  out.engine = *std::move(engine);
  return out;
}

// `n` requests of `prompt_len` random ids (seeded) and `max_tokens` outputs,
// EOS ignored, temperature 0.6, one seed each.
std::vector<GenerationRequest> FixedRequests(int n, int prompt_len, int max_tokens, int vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> id(0, std::min(vocab, 10000) - 1);
  std::vector<GenerationRequest> requests(static_cast<size_t>(n));
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationRequest& r = requests[i];
    r.prompt.resize(static_cast<size_t>(prompt_len));
    for (int32_t& t : r.prompt) t = id(rng);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0.6f;
    r.sampling.seed = i;
  }
  return requests;
}

// nano-vllm's bench.py workload through the offline Engine: `num_seqs`
// requests, prompt lengths and output lengths uniform in 100..1024 (seed 0),
// prompt ids uniform in 0..9999, EOS ignored, temperature 0.6.
bool ThroughputSection(const Sizes& z, const std::filesystem::path& model_dir, int num_seqs, std::ostream& table) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model_dir);
  if (!config.ok()) {
    table << "\nthroughput: " << config.status().ToString() << "\n";
    return false;
  }
  std::mt19937 rng(0);
  std::uniform_int_distribution<int> len(z.length_min, z.length_max), id(0, static_cast<int>(std::min<int64_t>(config->vocab_size, 10000)) - 1);
  std::vector<GenerationRequest> requests(static_cast<size_t>(num_seqs));
  int64_t blocks = 64;
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationRequest& r = requests[i];
    r.prompt.resize(static_cast<size_t>(len(rng)));
    for (int32_t& t : r.prompt) t = id(rng);
    r.max_tokens = len(rng);
    r.ignore_eos = true;
    r.sampling.temperature = 0.6f;
    r.sampling.seed = i;
    blocks += (std::ssize(r.prompt) + r.max_tokens + kBlockSize - 1) / kBlockSize;
  }
  std::unique_ptr<Backend> backend = MakeCudaBackend(0);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  // Every request at once: the warm-up already allocates the whole cache.
  absl::StatusOr<ServingEngine> serving = MakeServingEngine(z, model_dir, *backend, *solo, 4096, blocks);
  if (!serving.ok()) {
    table << "\nthroughput: " << serving.status().ToString() << "\n";
    return false;
  }
  Engine* engine = serving->engine.get();
  GenerationRequest warm;
  warm.prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  warm.max_tokens = 16;
  warm.ignore_eos = true;
  if (auto r = engine->Generate(std::span<const GenerationRequest>(&warm, 1)); !r.ok()) {
    table << "\nthroughput warm-up: " << r.status().ToString() << "\n";
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<GenerationResult>> results = engine->Generate(requests);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!results.ok()) {
    table << "\nthroughput: " << results.status().ToString() << "\n";
    return false;
  }
  int64_t prompt_tokens = 0, output_tokens = 0;
  for (const GenerationRequest& r : requests) prompt_tokens += std::ssize(r.prompt);
  for (const GenerationResult& r : *results) output_tokens += std::ssize(r.tokens);
  const GenerationStats& st = engine->last_stats();
  char line[512];
  std::snprintf(line, sizeof line,
                "\n## Offline throughput (nano-vllm bench.py workload), %s, random weights\n\n"
                "%d sequences, prompts and outputs of %d..%d tokens (seed 0), EOS ignored, temperature 0.6,"
                " Engine (max 8192 tokens and 256 sequences a step, blocks of %d, sampling on the GPU).\n\n"
                "| output tokens | prompt tokens | time | output tok/s | prefill tok/s | decode tok/s | steps |"
                " preemptions |\n|---|---|---|---|---|---|---|---|\n"
                "| %lld | %lld | %.2f s | %.0f | %.0f | %.0f | %lld | %lld |\n",
                z.smoke ? "the tiny smoke model" : "Qwen3-0.6B shapes", num_seqs, z.length_min, z.length_max, kBlockSize, static_cast<long long>(output_tokens), static_cast<long long>(prompt_tokens),
                seconds, output_tokens / seconds, st.prefill_seconds > 0 ? st.prefill_tokens / st.prefill_seconds : 0.0,
                st.decode_seconds > 0 ? st.decode_tokens / st.decode_seconds : 0.0, static_cast<long long>(st.steps),
                static_cast<long long>(st.preemptions));
  table << line;
  RecordTarget(Target::kThroughput, output_tokens / seconds);
  return true;
}

// Decode as served (see the top): for each batch B, B requests with 512-token
// prompts and Sizes::decode_steps + 1 output tokens through one Engine; ms/step is the
// engine's time in decode-only steps over their number. The step budget holds
// every prompt (256 x 512 tokens), so all B prefill in one step and then
// decode together: every decode step has exactly B sequences.
// `kernels` picks the CUDA backend's kernel set (cuda/kernel_set.h); the
// reference set runs the smallest and a middle batch only, for the ratio.
// `programmatic` false: the fast set without PDL (cuda/simt.cuh), the first
// two batches only, so a GPU run says whether PDL pays. `sampler_graphs`
// false: the sampler runs eagerly after the forward's graph (no decode-batch
// graphs, cuda/cuda_sampler.h), the first two batches only, against the rows
// where it is a graph of its own. `deterministic`: the backend's
// batch-invariant mode with the one-block-per-row sampler, as rank/ starts it
// (Sizes::det_decode_batches).
// Each row's ms/step is kept in g_decode_ms ("model|set|batch").
std::map<std::string, double> g_decode_ms;
absl::Status ServedDecodeRows(const Sizes& z, const std::filesystem::path& dir, const std::string& name, double bw,
                              int64_t weight_bytes, cuda::KernelSet kernels, bool programmatic, std::ostream& table,
                              bool sampler_graphs = true, bool fuse_layers = true, bool deterministic = false) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir);
  if (!c.ok()) return c.status();
  const int prompt = z.decode_prompt, outputs = z.decode_steps + 1, max_batch = z.max_decode_batch();
  const int64_t blocks_per_seq = (prompt + outputs + kBlockSize - 1) / kBlockSize;
  CudaBackendOptions backend_options;
  backend_options.kernels = kernels;
  backend_options.programmatic_launch = programmatic;
  backend_options.fuse_layer_ops = fuse_layers;
  backend_options.deterministic = deterministic;
  std::unique_ptr<Backend> backend = MakeCudaBackend(0, backend_options);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  absl::StatusOr<ServingEngine> serving =
      MakeServingEngine(z, dir, *backend, *solo, 2048, max_batch * blocks_per_seq + 16, std::max(8192, max_batch * prompt),
                        sampler_graphs, deterministic ? cuda::KernelSet::kReference : kernels);
  if (!serving.ok()) return serving.status();
  const int64_t kv_bytes_per_token = 2 * c->num_layers * c->num_kv_heads * c->head_dim * 2;
  // Warm-up: the cache, the graphs, cuBLAS and the sampler's first calls stay out of the numbers.
  if (auto warm = serving->engine->Generate(FixedRequests(1, 16, 4, static_cast<int>(c->vocab_size))); !warm.ok()) {
    return warm.status();
  }
  std::vector<int> batches = z.decode_batches;
  if (kernels == cuda::KernelSet::kReference && batches.size() > 2) batches = {batches.front(), batches[batches.size() / 2]};
  if ((!programmatic || !sampler_graphs || !fuse_layers) && batches.size() > 2) batches = {batches[0], batches[1]};
  if (deterministic) batches = z.det_decode_batches;
  const std::string set = absl::StrCat(cuda::KernelSetName(kernels), " kernels", programmatic ? "" : ", PDL off",
                                       sampler_graphs ? "" : ", sampler eager", fuse_layers ? "" : ", layers unfused",
                                       deterministic ? ", deterministic" : "");
  for (int batch : batches) {
    const std::vector<GenerationRequest> requests = FixedRequests(batch, prompt, outputs, static_cast<int>(c->vocab_size));
    absl::StatusOr<std::vector<GenerationResult>> results = serving->engine->Generate(requests);
    if (!results.ok()) return results.status();
    const GenerationStats& st = serving->engine->last_stats();
    const double steps = double(st.decode_tokens) / batch;
    if (steps < 1) return absl::InternalError(absl::StrCat("batch ", batch, ": no decode-only step was timed"));
    const double s = st.decode_seconds / steps;
    g_decode_ms[absl::StrCat(name, "|", set, "|", batch)] = s * 1e3;
    if (name == z.target_model && kernels == cuda::KernelSet::kFast && programmatic && sampler_graphs && fuse_layers &&
        batch == 1) {
      RecordTarget(Target::kBatch1Decode, s * 1e3);
    }
    const double floor = (weight_bytes + double(batch) * (prompt + outputs / 2) * kv_bytes_per_token) / bw;
    char line[320];
    std::snprintf(line, sizeof line,
                  "| %s | decode batch %d, ctx %d..%d (%s, GPU sampler, %s; %.0f steps) | %.3f ms/step | %.3f ms | %.0f%% |\n",
                  name.c_str(), batch, prompt, prompt + outputs, "graphs", set.c_str(), steps,
                  s * 1e3, floor * 1e3, 100 * floor / s);
    table << line;
  }
  return absl::OkStatus();
}

// Deterministic mode's served decode rows (Sizes::det_decode_batches) and
// their cost at the last batch against the fast rows: issue 28's target.
// Run last in ModelSection, so a run cut by its time cap keeps the rest.
absl::Status DeterministicDecodeRows(const Sizes& z, const std::filesystem::path& dir, const std::string& name,
                                     double bw, int64_t weight_bytes, std::ostream& table) {
  TPSERVE_RETURN_IF_ERROR(ServedDecodeRows(z, dir, name, bw, weight_bytes, cuda::KernelSet::kFast, true, table,
                                           /*sampler_graphs=*/true, /*fuse_layers=*/true, /*deterministic=*/true));
  {  // issue 28's target: deterministic decode at most 15% slower than the fast set at batch 64
    const int batch = z.det_decode_batches.back();
    const auto fast = g_decode_ms.find(absl::StrCat(name, "|fast kernels|", batch));
    const auto det = g_decode_ms.find(absl::StrCat(name, "|fast kernels, deterministic|", batch));
    if (fast != g_decode_ms.end() && det != g_decode_ms.end()) {
      const double ratio = det->second / fast->second;
      char line[320];
      std::snprintf(line, sizeof line,
                    "| %s | deterministic vs fast decode, batch %d (issue 28: <= 1.15x) | %.2fx ms/step (%+.0f%%) |"
                    " 1.15x | %s |\n",
                    name.c_str(), batch, ratio, 100 * (ratio - 1),
                    z.smoke ? "not judged (smoke)" : ratio <= 1.15 ? "met" : "not met");
      table << line;
    }
  }
  return absl::OkStatus();
}

// What WarmUp's graphs cost (worker/decode_graphs.h): `graphs` captured
// (each step once eagerly, captured, instantiated), the seconds per graph
// and the device memory they took (cudaMemGetInfo before and after: the
// executable graphs, and anything the first eager runs allocate lazily).
absl::Status CaptureRow(const Sizes& z, const std::string& name, DecodeGraphs& graphs, std::ostream& table) {
  size_t free_before = 0, free_after = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  const auto t0 = std::chrono::steady_clock::now();
  TPSERVE_RETURN_IF_ERROR(graphs.Capture());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  const size_t n = graphs.batch_sizes().size() + graphs.verify_shapes().size();
  const double mb = (static_cast<double>(free_before) - static_cast<double>(free_after)) / (1 << 20);
  char line[320];
  std::snprintf(line, sizeof line,
                "| %s | capturing %zu decode + %zu verification graphs (K = %zu), ctx %d | %.2f ms per graph "
                "| %.2f s in all | %.1f MB device memory |\n",
                name.c_str(), graphs.batch_sizes().size(), graphs.verify_shapes().size(),
                graphs.verify_proposals().size(), z.decode_prompt, 1e3 * seconds / static_cast<double>(n), seconds,
                mb);
  table << line;
  return absl::OkStatus();
}

// Verification steps (speculative decoding, issue 27: each sequence's last
// token and k proposals at context z.decode_prompt) replayed from their
// graphs (worker/decode_graphs.h) against the same steps run eagerly: batch 1
// with k = 1, 4, 8 (the smoke run: 1 and 4) against the graph's one-token
// decode step (c(k)), and batch 8 with k = 4 each and with mixed k (the smoke
// run: one proposal for 4 of the 8) against the graph's batch-8 decode step;
// first what capturing the graphs cost (CaptureRow). The cache holds zeros:
// timing only.
absl::Status VerifyGraphRows(const Sizes& z, const std::filesystem::path& dir, const std::string& name,
                             std::ostream& table) {
  std::unique_ptr<Backend> backend = MakeCudaBackend(0);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  const int32_t max_k = z.smoke ? 4 : kMaxVerifyGraphProposals;
  // The smoke run allows max_k proposals a step (few graphs for the
  // emulator to capture), the real one 8 k, as the workers do.
  const int32_t extra = z.smoke ? max_k : kMaxVerifyGraphSeqs * max_k;
  ModelOptions options{.max_num_tokens = 64, .max_num_seqs = kMaxVerifyGraphSeqs,
                       .max_position = z.decode_prompt + 64, .max_num_logits_rows = kMaxVerifyGraphSeqs + extra};
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir, *backend, *solo, options);
  if (!model.ok()) return model.status();
  Model& m = **model;
  const int32_t per_seq = static_cast<int32_t>((options.max_position + kBlockSize - 1) / kBlockSize);
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, m.kv_cache_shape(kMaxVerifyGraphSeqs * per_seq, kBlockSize));
  if (!cache.ok()) return cache.status();
  TPSERVE_RETURN_IF_ERROR(backend->Reserve(ReservedCapacityFor(m, kBlockSize)));
  DecodeGraphs graphs(m, *cache, *backend, StepCapacityFor(m, kBlockSize), VerifyGraphProposals(m));
  TPSERVE_RETURN_IF_ERROR(CaptureRow(z, name, graphs, table));
  std::vector<std::vector<int32_t>> tables(kMaxVerifyGraphSeqs);  // sequence s: blocks [s per_seq, (s + 1) per_seq)
  for (size_t s = 0; s < tables.size(); ++s) {
    for (int32_t b = 0; b < per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s) * per_seq + b);
  }
  auto step_of = [&](const std::vector<int32_t>& ks) {  // sequence s with ks[s] proposals
    std::vector<std::vector<int32_t>> tokens;
    std::vector<StepSequence> seqs;
    for (int32_t k : ks) tokens.emplace_back(static_cast<size_t>(k) + 1, 7);
    for (size_t s = 0; s < ks.size(); ++s) seqs.push_back({tokens[s], z.decode_prompt, tables[s], ks[s] + 1});
    return StepBatch::Build(seqs, kBlockSize);
  };
  // One row: the step of `ks` through its graph and eagerly, against `decode`.
  auto row = [&](const std::vector<int32_t>& ks, double decode, const std::string& what) -> absl::Status {
    absl::StatusOr<StepBatch> step = step_of(ks);
    if (!step.ok()) return step.status();
    const int64_t before = graphs.verify_replays();
    const double graph = TimeIt([&] { (void)graphs.Forward(step->view()); }, z.warmup, z.iters);
    if (graphs.verify_replays() == before) {
      return absl::InternalError(absl::StrCat("verification step ", what, " did not replay a graph"));
    }
    const double eager = TimeIt([&] { (void)m.Forward(step->view(), *cache); }, z.warmup, z.iters);
    char line[320];
    std::snprintf(line, sizeof line,
                  "| %s | verification step %s, ctx %d: graph vs eager (graph / graph decode %.2f) "
                  "| %.3f ms | %.3f ms eager | %.0f%% |\n",
                  name.c_str(), what.c_str(), z.decode_prompt, graph / decode, graph * 1e3, eager * 1e3,
                  100 * graph / eager);
    table << line;
    return absl::OkStatus();
  };
  auto decode_of = [&](size_t batch) -> absl::StatusOr<double> {  // the graph's one-token step
    absl::StatusOr<StepBatch> one = step_of(std::vector<int32_t>(batch, 0));
    if (!one.ok()) return one.status();
    return TimeIt([&] { (void)graphs.Forward(one->view()); }, z.warmup, z.iters);
  };
  TPSERVE_ASSIGN_OR_RETURN(const double decode1, decode_of(1));
  for (int32_t k : z.smoke ? std::vector<int32_t>{1, 4} : std::vector<int32_t>{1, 4, 8}) {
    TPSERVE_RETURN_IF_ERROR(row({k}, decode1, absl::StrCat("batch 1, k ", k, " (c(k))")));
  }
  TPSERVE_ASSIGN_OR_RETURN(const double decode8, decode_of(kMaxVerifyGraphSeqs));
  const std::vector<std::vector<int32_t>> batch8 =
      z.smoke ? std::vector<std::vector<int32_t>>{{1, 0, 1, 0, 1, 0, 0, 1}}
              : std::vector<std::vector<int32_t>>{{4, 4, 4, 4, 4, 4, 4, 4}, {4, 0, 2, 4, 1, 3, 4, 2}};
  for (const std::vector<int32_t>& ks : batch8) {
    TPSERVE_RETURN_IF_ERROR(row(ks, decode8, absl::StrCat("batch 8, k ", absl::StrJoin(ks, "/"))));
  }
  return absl::OkStatus();
}

// Decode and prefill of whole models next to their floors (see the top).
absl::Status ModelSection(const Sizes& z, const std::filesystem::path& dir, const std::string& name, double bw,
                          double flops, std::ostream& table) {
  const int64_t weight_bytes = DirBytes(dir, ".safetensors");
  TPSERVE_RETURN_IF_ERROR(ServedDecodeRows(z, dir, name, bw, weight_bytes, cuda::KernelSet::kFast, true, table));
  TPSERVE_RETURN_IF_ERROR(ServedDecodeRows(z, dir, name, bw, weight_bytes, cuda::KernelSet::kFast, false, table));
  TPSERVE_RETURN_IF_ERROR(
      ServedDecodeRows(z, dir, name, bw, weight_bytes, cuda::KernelSet::kFast, true, table, /*sampler_graphs=*/false));
  TPSERVE_RETURN_IF_ERROR(ServedDecodeRows(z, dir, name, bw, weight_bytes, cuda::KernelSet::kFast, true, table,
                                           /*sampler_graphs=*/true, /*fuse_layers=*/false));
  TPSERVE_RETURN_IF_ERROR(ServedDecodeRows(z, dir, name, bw, weight_bytes, cuda::KernelSet::kReference, true, table));
  std::unique_ptr<Backend> backend = MakeCudaBackend(0);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  ModelOptions options;
  options.max_num_tokens = 8192;
  options.max_num_seqs = 256;
  options.max_position = 2048;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir, *backend, *solo, options);
  if (!model.ok()) return model.status();
  Model& m = **model;
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, m.kv_cache_shape(256 * 32 + 64, kBlockSize));
  if (!cache.ok()) return cache.status();
  StepCapacity capacity;  // as the engine reserves: the decode attention workspace
  capacity.max_tokens = options.max_num_tokens;
  capacity.max_seqs = options.max_num_seqs;
  capacity.max_context = m.max_position();
  capacity.block_size = kBlockSize;
  capacity.max_query_heads = m.attention_shape().num_heads;
  capacity.max_head_dim = m.attention_shape().head_dim;
  if (absl::Status st = backend->Reserve(capacity); !st.ok()) return st;
  const int64_t params = weight_bytes / 2;
  for (auto [seqs, len] : z.prefills) {
    const StepBatch step = BenchStep(seqs, len, len);
    const double s = TimeIt([&] { (void)m.Forward(step.view(), *cache); }, std::min(z.warmup, 1), z.smoke ? 1 : 5);
    const double tokens = double(seqs) * len;
    const double floor_tps = flops / (2.0 * params);
    char line[256];
    std::snprintf(line, sizeof line, "| %s | prefill %d x %d | %.0f tok/s | %.0f tok/s | %.0f%% |\n", name.c_str(),
                  seqs, len, tokens / s, floor_tps, 100 * (tokens / s) / floor_tps);
    table << line;
  }
  if (name == "qwen3-0.6b") {  // decode attention alone: batch 64, 1K context
    const AttentionShape shape = m.attention_shape();
    const StepBatch step = BenchStep(64, 1, 1024);
    if (absl::Status st = backend->BeginStep(step.view(), cache->num_blocks(), kBlockSize, m.max_position()); !st.ok()) {
      return st;
    }
    Buffer qkv = backend->Allocate(DType::kBF16, {64, shape.qkv_width()});
    Buffer out = backend->Allocate(DType::kBF16, {64, int64_t{shape.num_heads} * shape.head_dim});
    const KvCacheLayer layer = cache->layer(0);
    const double s = TimeIt([&] { backend->Attention(qkv, shape, layer, 0.088f, out.tensor()); }, z.warmup, 50);
    const double bytes = 64.0 * 1024 * 2 * shape.num_kv_heads * shape.head_dim * 2;
    char line[256];
    std::snprintf(line, sizeof line,
                  "| %s | decode attention batch 64, ctx 1024 | %.1f GB/s (%.1f us) | %.1f GB/s | %.0f%% |\n",
                  name.c_str(), bytes / s / 1e9, s * 1e6, bw / 1e9, 100 * bytes / s / bw);
    table << line;
  }
  TPSERVE_RETURN_IF_ERROR(VerifyGraphRows(z, dir, name, table));
  return DeterministicDecodeRows(z, dir, name, bw, weight_bytes, table);
}

struct Options {
  std::string models, out_path = "bench/results/gpu_bench.md";
  std::string sections = "gemv,fusion,attention,prefill-attention,sampler,deterministic,models,profile,throughput";
  int throughput_seqs = 256;
  Sizes z;
  std::filesystem::path workdir = std::filesystem::temp_directory_path();
  bool Wants(absl::string_view section) const {
    for (absl::string_view s : absl::StrSplit(sections, ',', absl::SkipEmpty())) {
      if (s == section) return true;
    }
    return false;
  }
};

// The options of argv, or nullopt after saying what is wrong.
std::optional<Options> ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--smoke") {
      o.z = Sizes::Smoke();
      --i;  // no value
      continue;
    }
    if (i + 1 == argc) { std::fprintf(stderr, "%s needs a value\n", k.c_str()); return std::nullopt; }
    if (k == "--models") o.models = argv[i + 1];
    else if (k == "--out") o.out_path = argv[i + 1];
    else if (k == "--workdir") o.workdir = argv[i + 1];
    else if (k == "--sections") o.sections = argv[i + 1];
    else if (k == "--throughput-seqs") o.throughput_seqs = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "unknown option %s; see the comment at the top of gpu_bench.cc\n", k.c_str());
      return std::nullopt;
    }
  }
  if (o.models.empty()) o.models = o.z.models;
  return o;
}

// The markdown report, rewritten whole after every section so that a run cut
// short keeps what it measured.
class Report {
 public:
  explicit Report(std::filesystem::path path) : path_(std::move(path)) {}
  std::ostringstream& table() { return table_; }
  void Flush() {
    if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path());
    std::ofstream(path_) << table_.str();
  }

 private:
  std::filesystem::path path_;
  std::ostringstream table_;
};

// The preset models the run writes (each once), removed at the end.
class PresetModels {
 public:
  explicit PresetModels(std::filesystem::path workdir) : workdir_(std::move(workdir)) {}
  ~PresetModels() {
    for (const std::filesystem::path& dir : made_) std::filesystem::remove_all(dir);
  }
  absl::StatusOr<std::filesystem::path> Get(const std::string& preset) {
    for (const std::filesystem::path& dir : made_) {
      if (dir.filename() == "tpserve_gpu_bench_" + preset) return dir;
    }
    absl::StatusOr<std::filesystem::path> dir = PresetModel(workdir_, preset);
    if (dir.ok()) made_.push_back(*dir);
    return dir;
  }

 private:
  std::filesystem::path workdir_;
  std::vector<std::filesystem::path> made_;
};

// The kernel sections the options ask for; false when one failed.
bool RunKernelSections(const Options& o, double bw, Report& report) {
  bool ok = true;
  std::ostringstream& table = report.table();
  if (o.Wants("gemv")) {
    std::fprintf(stderr, "gpu_bench: small-batch Linear, GEMV vs cuBLAS\n");
    ok &= GemvSection(o.z, bw, table);
    report.Flush();
  }
  if (o.Wants("fusion")) {
    std::fprintf(stderr, "gpu_bench: a decoder layer's fused ops vs the unfused ops\n");
    ok &= gpu_bench::FusionSection(o.z, table);
    report.Flush();
  }
  if (o.Wants("attention")) {
    std::fprintf(stderr, "gpu_bench: decode attention, fast vs reference kernels\n");
    ok &= AttentionSplitSection(o.z, bw, table);
    report.Flush();
    std::fprintf(stderr, "gpu_bench: decode attention at GQA 4 and 8, tensor-core vs SIMT vs reference\n");
    ok &= AttentionVariantSection(o.z, bw, table);
    report.Flush();
  }
  if (o.Wants("prefill-attention")) {
    std::fprintf(stderr, "gpu_bench: tensor-core vs reference prefill attention\n");
    ok &= PrefillAttentionSection(o.z, table);
    report.Flush();
  }
  if (o.Wants("sampler")) {
    std::fprintf(stderr, "gpu_bench: GPU sampler, sliced vs row kernel\n");
    ok &= SamplerSection(o.z, table);
    report.Flush();
  }
  // Last of the kernel sections: a run cut by its time cap keeps the older sections' numbers.
  if (o.Wants("deterministic")) {
    std::fprintf(stderr, "gpu_bench: deterministic mode's GEMM and attention vs the fast set\n");
    ok &= gpu_bench::DeterministicSection(o.z, bw, table);
    report.Flush();
  }
  return ok;
}

// The whole-model sections (served decode and prefill per preset, the
// offline throughput workload); false when one failed.
bool RunModelSections(const Options& o, double bw, double flops, PresetModels& models, Report& report) {
  bool ok = true;
  std::ostringstream& table = report.table();
  if (o.Wants("models")) {
    table << "\n## Whole models (fast kernels: decode attention through cuda/decode_attention.cuh)\n\n"
          << "Decode rows: the served path (Engine step runner, CUDA graphs, GPU sampler). Prefill rows: one eager"
          << " Model::Forward (its [S, V] logits copied back).\n\n"
          << "| model | case | measured | floor | share of floor |\n|---|---|---|---|---|\n";
    for (absl::string_view preset : absl::StrSplit(o.models, ',', absl::SkipEmpty())) {
      std::fprintf(stderr, "gpu_bench: model %s\n", std::string(preset).c_str());
      absl::StatusOr<std::filesystem::path> dir = models.Get(std::string(preset));
      absl::Status st = dir.ok() ? ModelSection(o.z, *dir, std::string(preset), bw, flops, table) : dir.status();
      if (!st.ok()) {
        table << "| " << preset << " | failed: " << st.ToString() << " | | | |\n";
        ok = false;
      }
      report.Flush();
    }
  }
  if (o.Wants("profile")) {
    const std::string preset(*absl::StrSplit(o.models, ',', absl::SkipEmpty()).begin());
    std::fprintf(stderr, "gpu_bench: batch-1 decode step of %s op by op\n", preset.c_str());
    absl::StatusOr<std::filesystem::path> dir = models.Get(preset);
    if (dir.ok()) {
      ok &= gpu_bench::ProfileSection(o.z, *dir, preset, table);
    } else {
      table << "\nprofile: could not write the " << preset << " model: " << dir.status().ToString() << "\n";
      ok = false;
    }
    report.Flush();
  }
  if (o.Wants("throughput")) {
    std::fprintf(stderr, "gpu_bench: offline throughput, %d sequences\n", o.throughput_seqs);
    absl::StatusOr<std::filesystem::path> dir = models.Get(o.z.smoke ? "tiny" : "qwen3-0.6b");
    if (dir.ok()) {
      ok &= ThroughputSection(o.z, *dir, o.throughput_seqs, table);
    } else {
      table << "\nthroughput: could not write the qwen3-0.6b model: " << dir.status().ToString() << "\n";
      ok = false;
    }
    report.Flush();
  }
  return ok;
}

int Run(int argc, char** argv) {
  const std::optional<Options> o = ParseOptions(argc, argv);
  if (!o) return 2;
  if (cuda::DeviceCount() == 0) {
    std::fprintf(stderr, "gpu_bench: no CUDA device present; run it on a machine with a GPU\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  Report report(o->out_path);
  const double bw = CopyBandwidth(o->z.copy_bytes), flops = GemmFlops(o->z.gemm_n);
  report.table() << "# tpserve GPU benchmark on " << prop.name << "\n\n"
                 << "copy bandwidth (cudaMemcpy D2D, read+write): " << bw / 1e9 << " GB/s\n"
                 << "bf16 GEMM 8192^3 (cuBLAS): " << flops / 1e12 << " TFLOP/s\n";
  report.Flush();
  bool ok = RunKernelSections(*o, bw, report);
  {
    PresetModels models(o->workdir);
    ok &= RunModelSections(*o, bw, flops, models, report);
  }
  report.table() << TargetsTable(o->z.smoke);
  report.Flush();
  std::printf("%s", report.table().str().c_str());
  std::printf("\nwritten to %s\n", o->out_path.c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Run(argc, argv); }
