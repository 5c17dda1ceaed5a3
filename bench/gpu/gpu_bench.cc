// GPU benchmark (issue 5): random weights with the real Qwen3-0.6B and
// Llama-3.2-1B shapes (tpserve-make-model presets), bf16, tp = 1, each number
// next to a floor measured in the same run:
//   * decode ms/step at batch 1, 8, 64, 256 with a 512-token prompt (and, for
//     the ratio, batch 1 and 64 on the reference kernel set, and batch 1 and 8
//     on the fast set with programmatic dependent launch off), timed
//     the way the server runs it: the offline Engine's step runner (the
//     serving scheduler's steps, decode steps replayed as CUDA graphs, tokens
//     sampled on the GPU at temperature 0.6, no logits read back), against
//     (weight bytes + KV bytes read) / device-to-device copy bandwidth;
//   * prefill tokens/s for 1 × 1024 and 16 × 512 prompts, against the TFLOP/s of
//     a large cuBLAS bf16 GEMM (2 · params · tokens FLOPs, attention excluded);
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
//     set) against the reference kernel, in causal attention TFLOP/s;
//   * the GPU sampler at batch 1, 8, 64, vocabulary 151,936, temperature 0.6 +
//     top-p 0.9 (issue 12's target: <= 15 us at batch 1 on an H200): the
//     sliced kernels (fast set, cuda/sampling_sliced.cuh) against the
//     one-block-per-row kernel (reference set), launched eagerly and replayed
//     as a CUDA graph, and CudaSampler::Sample's whole call (upload, kernels,
//     read-back);
//   * offline throughput (nano-vllm's bench.py workload) through the Engine on
//     the Qwen3-0.6B-shaped model: 256 sequences, random prompt lengths
//     100..1024 and output lengths 100..1024 (seeded), EOS ignored, sampled at
//     temperature 0.6: output tokens/s.
// Prints the tables and writes them to --out (default
// bench/results/gpu_bench.md) after every section, so a run cut short by a
// time limit still leaves what it measured.
//
//   gpu_bench [--models qwen3-0.6b,llama-3.2-1b] [--out FILE] [--workdir DIR]
//             [--sections gemv,attention,prefill-attention,sampler,models,throughput] [--throughput-seqs 256] [--smoke]
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
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "backend/step_batch.h"
#include "base/check.h"
#include "base/status_macros.h"
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
#include "worker/engine.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve {
namespace {

constexpr int32_t kBlockSize = 16;

// Every size the bench uses. Full: the numbers of the top comment. --smoke:
// tiny everything, eager decode (the emulator cannot capture graphs), for the
// cuda-emu test that runs this program through the kernels' host build.
struct Sizes {
  bool smoke = false;
  size_t copy_bytes = size_t{1} << 30;
  int gemm_n = 8192;
  int warmup = 3, iters = 20;                // model and attention timings
  std::vector<int32_t> attention_contexts{512, 1024, 4096, 8192, 32768}, attention_batches{1, 8, 64, 256};
  std::vector<int32_t> prefill_attention_prompts{512, 2048, 8192};
  std::vector<int32_t> variant_contexts{1024, 4096, 8192, 32768};  // the decode variants' section
  int variant_batch = 64;
  std::vector<int> decode_batches{1, 8, 64, 256};
  int decode_prompt = 512, decode_steps = 32;
  std::vector<std::pair<int, int>> prefills{{1, 1024}, {16, 512}};  // sequences x tokens
  int length_min = 100, length_max = 1024;   // throughput prompts and outputs
  std::string models = "qwen3-0.6b,llama-3.2-1b";
  struct Projection {
    const char* name;
    int64_t K, N;  // x [M, K] · w [N, K]ᵀ
  };
  std::vector<Projection> gemv_shapes{{"qkv", 1024, 4096}, {"o", 2048, 1024}, {"gate_up", 1024, 6144},
                                      {"down", 3072, 1024}};
  std::vector<int64_t> gemv_rows{1, 2, 4, 8};
  struct Mlp {
    const char* name;
    int64_t K, F;  // x [M, K] · [gate; up] [2F, K]ᵀ -> silu(gate) * up [M, F]
  };
  std::vector<Mlp> mlp_shapes{{"qwen3-0.6b", 1024, 3072}, {"llama-3.2-1b", 2048, 8192}};
  size_t gemv_rotate_bytes = size_t{256} << 20;  // weights cycled through, past the L2 (50 MB on an H200)
  int gemv_iters = 200;
  int32_t sampler_vocab = 151936;  // Qwen's
  std::vector<int32_t> sampler_batches{1, 8, 64};
  int sampler_iters = 500;

  static Sizes Smoke() {
    Sizes z;
    z.smoke = true;
    z.copy_bytes = size_t{1} << 20, z.gemm_n = 64, z.warmup = 0, z.iters = 1;
    z.attention_contexts = {600}, z.attention_batches = {1, 2};  // two 512-key partitions
    z.prefill_attention_prompts = {70};                          // two 64-row query tiles
    z.variant_contexts = {600}, z.variant_batch = 2;
    z.decode_batches = {1, 3}, z.decode_prompt = 20, z.decode_steps = 3;
    z.prefills = {{1, 24}, {2, 16}};
    z.length_min = 8, z.length_max = 16;
    z.models = "tiny";
    z.gemv_shapes = {{"qkv", 64, 256}, {"down", 96, 64}};
    z.gemv_rows = {1, 8};
    z.mlp_shapes = {{"tiny", 64, 96}};
    z.gemv_rotate_bytes = 1, z.gemv_iters = 1;
    z.sampler_vocab = 2053, z.sampler_batches = {1, 3}, z.sampler_iters = 1;
    return z;
  }
  int max_attention_context() const { return *std::max_element(attention_contexts.begin(), attention_contexts.end()); }
  int max_attention_batch() const { return *std::max_element(attention_batches.begin(), attention_batches.end()); }
  int max_decode_batch() const { return *std::max_element(decode_batches.begin(), decode_batches.end()); }
};

// A random-weight model of the smoke run (`--models tiny`).
constexpr const char* kTinyModelArgs =
    "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --vocab 301 "
    "--dtype bf16";

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

// A step of `num_seqs` sequences with `new_tokens` new tokens each ending at
// position seq_len − 1; sequence s owns blocks [s · blocks_per_seq, ...).
StepBatch BenchStep(int32_t num_seqs, int32_t new_tokens, int32_t seq_len) {
  const int32_t blocks_per_seq = (seq_len + kBlockSize - 1) / kBlockSize;
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(num_seqs)), tables(static_cast<size_t>(num_seqs));
  std::vector<StepSequence> seqs;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const size_t i = static_cast<size_t>(s);
    for (int32_t pos = seq_len - new_tokens; pos < seq_len; ++pos) ids[i].push_back((s * 7919 + pos * 31) % 30000);
    for (int32_t b = 0; b < blocks_per_seq; ++b) tables[i].push_back(s * blocks_per_seq + b);
    seqs.push_back({ids[i], seq_len - new_tokens, tables[i]});
  }
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, kBlockSize);
  TPSERVE_CHECK(step.ok(), "BenchStep: ", step.status().message());
  return *std::move(step);
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

// Decode attention of one layer with Qwen3-0.6B's geometry (Hq 16, Hkv 8, hd
// 128, blocks of 16): the fast kernel (KernelSet::kFast after Reserve) beside
// the reference kernels' split path (after Reserve) and single kernel (a
// backend without), every sequence on its own blocks. The cache is zeros: the
// kernels' work does not depend on the values.
bool AttentionSplitSection(const Sizes& z, double bw, std::ostream& table) {
  const AttentionShape shape{16, 8, 128};
  const int32_t max_context = z.max_attention_context(), max_batch = z.max_attention_batch();
  std::unique_ptr<Backend> single = MakeCudaBackend(0, cuda::KernelSet::kReference),
                           split = MakeCudaBackend(0, cuda::KernelSet::kReference),
                           fast = MakeCudaBackend(0, cuda::KernelSet::kFast);
  StepCapacity capacity;
  capacity.max_tokens = max_batch;
  capacity.max_seqs = max_batch;
  capacity.max_context = max_context;
  capacity.block_size = kBlockSize;
  capacity.max_query_heads = shape.num_heads;
  capacity.max_head_dim = shape.head_dim;
  for (Backend* b : {split.get(), fast.get()}) {
    if (absl::Status st = b->Reserve(capacity); !st.ok()) {
      table << "\ndecode attention: Reserve failed on " << b->name() << ": " << st.ToString() << "\n";
      return false;
    }
  }
  const int64_t num_blocks = int64_t{max_batch} * ((max_context + kBlockSize - 1) / kBlockSize);
  Buffer k = split->Allocate(DType::kBF16, {num_blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer v = split->Allocate(DType::kBF16, {num_blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer qkv = split->Allocate(DType::kBF16, {max_batch, shape.qkv_width()});
  Buffer out = split->Allocate(DType::kBF16, {max_batch, int64_t{shape.num_heads} * shape.head_dim});
  split->Synchronize();
  const KvCacheLayer layer{k.tensor(), v.tensor()};
  table << "\n## Decode attention: fast kernel vs reference split (flash-decoding, partitions of "
        << cuda::kDecodePartitionSize << " keys) and single kernel\n\nOne layer, Hq 16, Hkv 8, hd 128, block size"
        << " 16; KV bytes read / time against the copy bandwidth.\n\n| context | batch | single (ref) | split (ref)"
        << " | fast | fast/split | split KV GB/s (share) | fast KV GB/s (share of copy bw) |\n"
        << "|---|---|---|---|---|---|---|---|\n";
  for (int32_t ctx : z.attention_contexts) {
    for (int32_t batch : z.attention_batches) {
      const StepBatch step = BenchStep(batch, 1, ctx);
      const Tensor q = qkv.tensor().Rows(0, batch), o = out.tensor().Rows(0, batch);
      double seconds[3] = {0, 0, 0};
      for (int which = 0; which < 3; ++which) {
        Backend& b = which == 0 ? *single : which == 1 ? *split : *fast;
        if (absl::Status st = b.BeginStep(step.view(), num_blocks, kBlockSize, max_context); !st.ok()) {
          table << "BeginStep failed: " << st.ToString() << "\n";
          return false;
        }
        seconds[which] = TimeIt([&] { b.Attention(q, shape, layer, 0.088f, o); }, z.warmup,
                                z.smoke ? 1 : ctx * batch > 1 << 20 ? 10 : 50);
      }
      const double bytes = double(batch) * ctx * 2 * shape.num_kv_heads * shape.head_dim * 2;
      char line[256];
      std::snprintf(line, sizeof line, "| %d | %d | %.1f us | %.1f us | %.1f us | %.2f | %.0f (%.0f%%) | %.0f (%.0f%%) |\n",
                    ctx, batch, seconds[0] * 1e6, seconds[1] * 1e6, seconds[2] * 1e6, seconds[2] / seconds[1],
                    bytes / seconds[1] / 1e9, 100 * bytes / seconds[1] / bw, bytes / seconds[2] / 1e9,
                    100 * bytes / seconds[2] / bw);
      table << line;
    }
  }
  return true;
}

// Device memory of the variants' section, freed at the end of it.
struct DeviceBuffers {
  std::vector<void*> all;
  template <typename T>
  T* Zeros(size_t count) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    CUDA_CHECK(cudaMemset(p, 0, count * sizeof(T)));
    all.push_back(p);
    return static_cast<T*>(p);
  }
  ~DeviceBuffers() {
    for (void* p : all) cudaFree(p);
  }
};

// Decode attention at GQA groups 4 and 8 (hd 128, blocks of 16, Hkv 2: one
// tp-4 shard of Llama-3-8B (Hq 8) and of Llama-3-70B (Hq 16)): the fast
// kernel's variants (cuda/decode_attention.cuh: the tensor-core one the
// launcher chooses for these groups, and the SIMT one forced), each with the
// plan PlanDecode gives it for an eager step, against the reference set's
// split kernel (flash-decoding over partitions of kDecodePartitionSize keys),
// launched directly on the same arrays, every sequence on its own blocks.
// The cache is zeros: the kernels' work does not depend on the values.
bool AttentionVariantSection(const Sizes& z, double bw, std::ostream& table) {
  constexpr int kHkv = 2, kHd = 128;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int32_t batch = z.variant_batch;
  const int32_t max_context = *std::max_element(z.variant_contexts.begin(), z.variant_contexts.end());
  const int32_t blocks_per_seq = (max_context + kBlockSize - 1) / kBlockSize;
  const int64_t num_blocks = int64_t{batch} * blocks_per_seq;
  const int max_partitions = (max_context + cuda::kDecodePartitionSize - 1) / cuda::kDecodePartitionSize;
  DeviceBuffers mem;
  const size_t cache = static_cast<size_t>(num_blocks * kBlockSize * kHkv * kHd);
  const auto* k = mem.Zeros<__nv_bfloat16>(cache);
  const auto* v = mem.Zeros<__nv_bfloat16>(cache);
  std::vector<int32_t> seqs(static_cast<size_t>(batch)), tables(static_cast<size_t>(num_blocks));
  for (int32_t s = 0; s < batch; ++s) seqs[static_cast<size_t>(s)] = s;
  for (int64_t b = 0; b < num_blocks; ++b) tables[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  int32_t* token_seq = mem.Zeros<int32_t>(seqs.size());
  int32_t* block_tables = mem.Zeros<int32_t>(tables.size());
  int32_t* positions = mem.Zeros<int32_t>(seqs.size());
  CUDA_CHECK(cudaMemcpy(token_seq, seqs.data(), seqs.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(block_tables, tables.data(), tables.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  table << "\n## Decode attention at GQA 4 and 8: tensor-core vs SIMT fast kernel vs reference split\n\nOne layer,"
        << " Hkv " << kHkv << ", hd " << kHd << ", block size " << kBlockSize << ", batch " << batch
        << "; KV bytes read / time against the copy bandwidth; plans from PlanDecode for an eager step.\n\n"
        << "| Hq (group) | context | mma | simt | split (ref) | mma/simt | mma KV GB/s (share of copy bw) |"
        << " simt (share) | split (share) |\n|---|---|---|---|---|---|---|---|---|\n";
  for (int group : {4, 8}) {
    cuda::PagedAttentionArgs a;
    a.num_heads = group * kHkv;
    a.num_kv_heads = kHkv;
    a.head_dim = kHd;
    a.num_tokens = batch;
    a.token_seq = token_seq;
    a.positions = positions;
    a.block_tables = block_tables;
    a.max_blocks_per_seq = blocks_per_seq;
    a.block_size = kBlockSize;
    a.scale = 0.088f;
    a.k_cache = k;
    a.v_cache = v;
    a.qkv = mem.Zeros<__nv_bfloat16>(static_cast<size_t>(batch) * (a.num_heads + 2 * kHkv) * kHd);
    a.out = mem.Zeros<__nv_bfloat16>(static_cast<size_t>(batch) * a.num_heads * kHd);
    const size_t ws_floats = cuda::SplitDecodeWorkspaceFloats(batch, a.num_heads, kHd,
                                                              std::max(max_partitions, cuda::DecodeSplitCap(max_context)));
    float* ws = mem.Zeros<float>(ws_floats);
    for (int32_t ctx : z.variant_contexts) {
      const std::vector<int32_t> pos(static_cast<size_t>(batch), ctx - 1);
      CUDA_CHECK(cudaMemcpy(positions, pos.data(), pos.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      double seconds[3] = {0, 0, 0};
      const int iters = z.smoke ? 1 : int64_t{ctx} * batch > 1 << 20 ? 10 : 50;
      for (int which = 0; which < 2; ++which) {
        const cuda::DecodeVariant variant = which == 0 ? cuda::DecodeVariant::kMma : cuda::DecodeVariant::kSimt;
        const cuda::DecodePlan plan = cuda::PlanDecode(
            {batch, kHkv, ctx, prop.multiProcessorCount, false, cuda::FastDecodeBlocksPerSm(variant, kHd, group)});
        cudaError_t err = cudaSuccess;
        seconds[which] = TimeIt([&] {
          if (err == cudaSuccess) err = cuda::LaunchFastDecodeAttention(variant, a, 0, plan, ws, ws_floats, nullptr);
        }, z.warmup, iters);
        if (err != cudaSuccess) {
          table << "LaunchFastDecodeAttention (" << cuda::DecodeVariantName(variant) << ", group " << group
                << ") failed: " << cudaGetErrorString(err) << "\n";
          return false;
        }
      }
      cuda::SplitDecodeArgs split;
      split.max_partitions = (ctx + cuda::kDecodePartitionSize - 1) / cuda::kDecodePartitionSize;
      split.workspace = ws;
      split.workspace_floats = ws_floats;
      cudaError_t err = cudaSuccess;
      seconds[2] = TimeIt([&] {
        if (err == cudaSuccess) err = cuda::LaunchSplitDecodeAttention(a, split, nullptr);
      }, z.warmup, iters);
      if (err != cudaSuccess) {
        table << "LaunchSplitDecodeAttention failed: " << cudaGetErrorString(err) << "\n";
        return false;
      }
      const double bytes = double(batch) * ctx * 2 * kHkv * kHd * 2;
      char line[320];
      std::snprintf(line, sizeof line,
                    "| %d (%d) | %d | %.1f us | %.1f us | %.1f us | %.2f | %.0f (%.0f%%) | %.0f%% | %.0f%% |\n",
                    a.num_heads, group, ctx, seconds[0] * 1e6, seconds[1] * 1e6, seconds[2] * 1e6,
                    seconds[0] / seconds[1], bytes / seconds[0] / 1e9, 100 * bytes / seconds[0] / bw,
                    100 * bytes / seconds[1] / bw, 100 * bytes / seconds[2] / bw);
      table << line;
    }
  }
  return true;
}

// The MLP's first half at small M on the fast set: LinearSiluMul (one GEMV
// launch writing silu(gate) * up) against Linear into gate_up then SiluMul
// (two launches and the [M, 2F] round trip), weights cycled as in GemvSection.
bool MlpSection(const Sizes& z, Backend& fast, std::ostream& table) {
  table << "\n## MLP gate/up + SiLU at small batch: fused GEMV vs GEMV + SiluMul (fast set)\n\n"
        << "| model | K -> 2 x F | M | fused | GEMV + SiluMul | fused / two ops |\n|---|---|---|---|---|---|\n";
  const int64_t max_rows = *std::max_element(z.gemv_rows.begin(), z.gemv_rows.end());
  for (const Sizes::Mlp& p : z.mlp_shapes) {
    const double bytes = double(2 * p.F) * p.K * 2;
    const size_t copies = std::max<size_t>(2, (z.gemv_rotate_bytes + size_t(bytes) - 1) / size_t(bytes));
    std::vector<Buffer> weights;
    for (size_t c = 0; c < copies; ++c) weights.push_back(fast.Allocate(DType::kBF16, {2 * p.F, p.K}));
    Buffer x = fast.Allocate(DType::kBF16, {max_rows, p.K}), gate_up = fast.Allocate(DType::kBF16, {max_rows, 2 * p.F}),
           act = fast.Allocate(DType::kBF16, {max_rows, p.F});
    fast.Synchronize();
    for (int64_t m : z.gemv_rows) {
      const Tensor xm = x.tensor().Rows(0, m), gm = gate_up.tensor().Rows(0, m), am = act.tensor().Rows(0, m);
      size_t next = 0;
      const double fused =
          TimeIt([&] { fast.LinearSiluMul(xm, weights[next++ % copies], gm, am); }, z.warmup, z.gemv_iters);
      const double two = TimeIt(
          [&] {
            fast.Linear(xm, weights[next++ % copies], nullptr, gm);
            fast.SiluMul(gm, am);
          },
          z.warmup, z.gemv_iters);
      char line[256];
      std::snprintf(line, sizeof line, "| %s | %lld -> 2 x %lld | %lld | %.2f us | %.2f us | %.2f |\n", p.name,
                    static_cast<long long>(p.K), static_cast<long long>(p.F), static_cast<long long>(m), fused * 1e6,
                    two * 1e6, fused / two);
      table << line;
    }
  }
  return true;
}

// Linear at small M through the fast kernel set (the GEMV) and the reference
// set (cuBLAS) on the same buffers. Each timed call reads a different copy of
// the weights (gemv_rotate_bytes of them, zeros: the work does not depend on
// the values), so the weights come from HBM, not the L2, as in a decode step.
bool GemvSection(const Sizes& z, double bw, std::ostream& table) {
  std::unique_ptr<Backend> fast = MakeCudaBackend(0, cuda::KernelSet::kFast);
  std::unique_ptr<Backend> ref = MakeCudaBackend(0, cuda::KernelSet::kReference);
  table << "\n## Linear at small batch: GEMV (fast set) vs cuBLAS (reference set)\n\nWeight bytes read / time"
        << " against the copy bandwidth; " << z.gemv_iters << " calls per number, weights cycled through "
        << (z.gemv_rotate_bytes >> 20) << " MiB.\n\n| projection | K -> N | M | GEMV | cuBLAS | GEMV GB/s (share)"
        << " | cuBLAS GB/s (share) |\n|---|---|---|---|---|---|---|\n";
  const int64_t max_rows = *std::max_element(z.gemv_rows.begin(), z.gemv_rows.end());
  for (const Sizes::Projection& p : z.gemv_shapes) {
    const double bytes = double(p.N) * p.K * 2;
    const size_t copies = std::max<size_t>(2, (z.gemv_rotate_bytes + size_t(bytes) - 1) / size_t(bytes));
    std::vector<Buffer> weights;
    for (size_t c = 0; c < copies; ++c) weights.push_back(fast->Allocate(DType::kBF16, {p.N, p.K}));
    Buffer x = fast->Allocate(DType::kBF16, {max_rows, p.K}), y = fast->Allocate(DType::kBF16, {max_rows, p.N});
    fast->Synchronize();
    for (int64_t m : z.gemv_rows) {
      const Tensor xm = x.tensor().Rows(0, m), ym = y.tensor().Rows(0, m);
      double seconds[2] = {0, 0};
      for (int which = 0; which < 2; ++which) {
        Backend& b = which == 0 ? *fast : *ref;
        size_t next = 0;
        seconds[which] = TimeIt([&] { b.Linear(xm, weights[next++ % copies], nullptr, ym); }, z.warmup, z.gemv_iters);
      }
      char line[256];
      std::snprintf(line, sizeof line, "| %s | %lld -> %lld | %lld | %.2f us | %.2f us | %.0f (%.0f%%) | %.0f (%.0f%%) |\n",
                    p.name, static_cast<long long>(p.K), static_cast<long long>(p.N), static_cast<long long>(m),
                    seconds[0] * 1e6, seconds[1] * 1e6, bytes / seconds[0] / 1e9, 100 * bytes / seconds[0] / bw,
                    bytes / seconds[1] / 1e9, 100 * bytes / seconds[1] / bw);
      table << line;
    }
  }
  return MlpSection(z, *fast, table);
}

// A device array of `count` T copied from host, freed by the caller with cudaFree.
template <typename T>
T* DeviceArray(const std::vector<T>& host) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(sizeof(T) * host.size(), 1)));
  if (!host.empty()) CUDA_CHECK(cudaMemcpy(p, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

// Seconds per replay of `enqueue`'s launches captured into a CUDA graph on `stream`.
template <typename Fn>
double TimeGraph(cudaStream_t stream, Fn&& enqueue, int iters) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double s = TimeIt([&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, 3, iters);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return s;
}

// The sampler's kernels alone on random bf16 logits [1, B, V] (temperature
// 0.6, top-p 0.9, no penalties or log-probs): the sliced path (as CudaSampler
// plans it on this device) and the row kernel, eager and as a graph
// (the emulator cannot capture: --smoke times eager launches only); then
// CudaSampler::Sample under each kernel set, the whole call.
bool SamplerSection(const Sizes& z, std::ostream& table) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int32_t V = z.sampler_vocab;
  table << "\n## GPU sampler: sliced (fast set) vs one block per row (reference set)\n\nV = " << V
        << ", bf16 logits, temperature 0.6 + top-p 0.9, " << z.sampler_iters << " calls per number; kernels"
        << " launched eagerly and replayed as one CUDA graph; Sample = CudaSampler::Sample's whole call (upload,"
        << " kernels, read-back, sync).\n\n| batch | slices | sliced eager | sliced graph | row eager | row graph |"
        << " Sample fast | Sample reference |\n|---|---|---|---|---|---|---|---|\n";
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int32_t B : z.sampler_batches) {
    std::vector<uint16_t> logits(static_cast<size_t>(B) * V);
    for (uint16_t& x : logits) x = FloatToBf16(normal(rng));
    std::vector<sampling::RowParams> params(B);
    std::vector<int32_t> index(B), offsets(B + 1, 0);
    for (int32_t r = 0; r < B; ++r) {
      params[r].temperature = 0.6f, params[r].top_p = 0.9f, params[r].uniform = (r + 0.5) / B;
      index[r] = r;
    }
    uint16_t* d_logits = DeviceArray(logits);
    sampling::RowParams* d_params = DeviceArray(params);
    int32_t* d_index = DeviceArray(index);
    int32_t* d_offsets = DeviceArray(offsets);
    sampling::RowResult* d_results = DeviceArray(std::vector<sampling::RowResult>(B));
    sampling::TopLogprob* d_top = DeviceArray(std::vector<sampling::TopLogprob>(B));
    cuda::SlicedSampleArgs sliced;
    sliced.gathered = d_logits, sliced.rows = B, sliced.layout_rows = B, sliced.row_index = d_index;
    sliced.shard_vocab = V, sliced.vocab = V, sliced.params = d_params, sliced.results = d_results;
    sliced.plan = cuda::PlanSlices(B, V, prop.multiProcessorCount);
    sliced.stages = cuda::PlanSliceStages(params.data(), B, V);
    sliced.workspace_bytes = cuda::SlicedSampleWorkspaceBytes(B, sliced.plan.slices);
    CUDA_CHECK(cudaMalloc(&sliced.workspace, sliced.workspace_bytes));
    cuda::SampleRowsArgs row;
    row.gathered = d_logits, row.rows = B, row.layout_rows = B, row.row_index = d_index, row.shard_vocab = V;
    row.vocab = V, row.params = d_params, row.entry_offsets = d_offsets, row.top_stride = 1, row.top = d_top;
    row.results = d_results;
    const auto run_sliced = [&] { CUDA_CHECK(cuda::LaunchSlicedSample(sliced, stream)); };
    const auto run_row = [&] { CUDA_CHECK(cuda::LaunchSampleRows(row, stream)); };
    const auto eager = [&](auto&& fn) {
      return TimeIt([&] { fn(); CUDA_CHECK(cudaStreamSynchronize(stream)); }, z.smoke ? 0 : 3, z.sampler_iters);
    };
    const double sliced_eager = eager(run_sliced), row_eager = eager(run_row);
    const double sliced_graph = z.smoke ? 0 : TimeGraph(stream, run_sliced, z.sampler_iters);
    const double row_graph = z.smoke ? 0 : TimeGraph(stream, run_row, z.sampler_iters);
    double sample[2] = {0, 0};
    for (int which = 0; which < 2; ++which) {
      cuda::CudaSampler::Options options;
      options.max_seqs = B, options.vocab_size = V;
      options.kernels = which == 0 ? cuda::KernelSet::kFast : cuda::KernelSet::kReference;
      auto sampler = cuda::CudaSampler::Create(options, stream);
      if (!sampler.ok()) {
        table << "| " << B << " | CudaSampler::Create failed: " << sampler.status().ToString() << " |\n";
        return false;
      }
      std::vector<std::unique_ptr<SequenceSamplingState>> seqs;
      std::vector<SequenceSamplingState*> ptrs;
      for (int32_t r = 0; r < B; ++r) {
        SamplingParams p;
        p.temperature = 0.6f, p.top_p = 0.9f, p.seed = static_cast<uint64_t>(r);
        seqs.push_back(std::make_unique<SequenceSamplingState>(p, std::vector<int32_t>{1}, std::vector<int32_t>{}));
        ptrs.push_back(seqs.back().get());
      }
      const Tensor gathered(d_logits, DType::kBF16, Device::kCuda, {1, B, V});
      sample[which] = TimeIt([&] { (*sampler)->Sample(gathered, V, ptrs); }, z.smoke ? 0 : 3, z.sampler_iters);
    }
    const auto us = [](double s) { return s * 1e6; };
    char line[256];
    std::snprintf(line, sizeof line, "| %d | %d | %.1f us | %s | %.1f us | %s | %.1f us | %.1f us |\n", B,
                  sliced.plan.slices, us(sliced_eager),
                  z.smoke ? "-" : absl::StrCat(absl::SixDigits(us(sliced_graph)), " us").c_str(), us(row_eager),
                  z.smoke ? "-" : absl::StrCat(absl::SixDigits(us(row_graph)), " us").c_str(), us(sample[0]),
                  us(sample[1]));
    table << line;
    for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_params), static_cast<void*>(d_index),
                    static_cast<void*>(d_offsets), static_cast<void*>(d_results), static_cast<void*>(d_top),
                    sliced.workspace}) {
      CUDA_CHECK(cudaFree(p));
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return true;
}

// Prefill attention of one layer with Qwen3-0.6B's geometry (Hq 16, Hkv 8, hd
// 128, blocks of 16): one prompt of P tokens from position 0, the fast kernel
// set (the tensor-core prefill kernel, cuda/prefill_attention.cuh) against the
// reference set (one block per token and KV head). TFLOP/s counts the causal
// work: Q·Kᵀ and P·V over P·(P+1)/2 (query, key) pairs, 4 · Hq · hd FLOPs each.
// The cache is zeros: the kernels' work does not depend on the values.
bool PrefillAttentionSection(const Sizes& z, std::ostream& table) {
  const AttentionShape shape{16, 8, 128};
  const int32_t max_prompt =
      *std::max_element(z.prefill_attention_prompts.begin(), z.prefill_attention_prompts.end());
  std::unique_ptr<Backend> reference = MakeCudaBackend(0, cuda::KernelSet::kReference),
                           fast = MakeCudaBackend(0, cuda::KernelSet::kFast);
  const int64_t num_blocks = (max_prompt + kBlockSize - 1) / kBlockSize;
  Buffer k = fast->Allocate(DType::kBF16, {num_blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer v = fast->Allocate(DType::kBF16, {num_blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer qkv = fast->Allocate(DType::kBF16, {max_prompt, shape.qkv_width()});
  Buffer out = fast->Allocate(DType::kBF16, {max_prompt, int64_t{shape.num_heads} * shape.head_dim});
  fast->Synchronize();
  const KvCacheLayer layer{k.tensor(), v.tensor()};
  table << "\n## Prefill attention: tensor-core kernel (fast set) vs reference kernel\n\nOne layer, one prompt, Hq 16,"
        << " Hkv 8, hd 128, block size 16; causal FLOPs (4 · Hq · hd per visible query-key pair) / time.\n\n"
        << "| prompt | reference | tensor-core | speed-up | reference TFLOP/s | tensor-core TFLOP/s |\n"
        << "|---|---|---|---|---|---|\n";
  for (int32_t prompt : z.prefill_attention_prompts) {
    const StepBatch step = BenchStep(1, prompt, prompt);
    const Tensor q = qkv.tensor().Rows(0, prompt), o = out.tensor().Rows(0, prompt);
    double seconds[2] = {0, 0};
    for (int which = 0; which < 2; ++which) {
      Backend& b = which == 0 ? *reference : *fast;
      if (absl::Status st = b.BeginStep(step.view(), num_blocks, kBlockSize, max_prompt); !st.ok()) {
        table << "BeginStep failed: " << st.ToString() << "\n";
        return false;
      }
      seconds[which] = TimeIt([&] { b.Attention(q, shape, layer, 0.088f, o); }, z.warmup, z.smoke ? 1 : 20);
    }
    const double flops = 4.0 * shape.num_heads * shape.head_dim * (double(prompt) * (prompt + 1) / 2);
    char line[256];
    std::snprintf(line, sizeof line, "| %d | %.3f ms | %.3f ms | %.2f | %.1f | %.1f |\n", prompt, seconds[0] * 1e3,
                  seconds[1] * 1e3, seconds[0] / seconds[1], flops / seconds[0] / 1e12, flops / seconds[1] / 1e12);
    table << line;
  }
  return true;
}

// An Engine on `backend` as tpserve-worker rank 0 runs one: tp = 1, decode
// steps as CUDA graphs, sampling on the GPU; blocks of kBlockSize.
struct ServingEngine {
  std::unique_ptr<cuda::CudaSampler> sampler;
  std::unique_ptr<Engine> engine;
};
absl::StatusOr<ServingEngine> MakeServingEngine(const Sizes& z, const std::filesystem::path& model_dir,
                                                Backend& backend, Communicator& solo, int64_t max_position,
                                                int64_t num_blocks, int64_t max_num_tokens = 8192) {
  EngineOptions options;
  options.enforce_eager = z.smoke;
  options.model.max_num_tokens = max_num_tokens;
  options.model.max_num_seqs = 256;
  options.model.max_position = max_position;
  options.block_size = kBlockSize;
  options.num_blocks = num_blocks;  // allocated (and the graphs captured) once, at the first Generate
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model_dir);
  if (!config.ok()) return config.status();
  cuda::CudaSampler::Options sampling;
  sampling.max_seqs = static_cast<int32_t>(options.model.max_num_seqs);
  sampling.vocab_size = config->vocab_size;
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
// two batches only, so a GPU run says whether PDL pays.
absl::Status ServedDecodeRows(const Sizes& z, const std::filesystem::path& dir, const std::string& name, double bw,
                              int64_t weight_bytes, cuda::KernelSet kernels, bool programmatic, std::ostream& table) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir);
  if (!c.ok()) return c.status();
  const int prompt = z.decode_prompt, outputs = z.decode_steps + 1, max_batch = z.max_decode_batch();
  const int64_t blocks_per_seq = (prompt + outputs + kBlockSize - 1) / kBlockSize;
  std::unique_ptr<Backend> backend = MakeCudaBackend(0, kernels, programmatic);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  absl::StatusOr<ServingEngine> serving =
      MakeServingEngine(z, dir, *backend, *solo, 2048, max_batch * blocks_per_seq + 16, std::max(8192, max_batch * prompt));
  if (!serving.ok()) return serving.status();
  const int64_t kv_bytes_per_token = 2 * c->num_layers * c->num_kv_heads * c->head_dim * 2;
  // Warm-up: the cache, the graphs, cuBLAS and the sampler's first calls stay out of the numbers.
  if (auto warm = serving->engine->Generate(FixedRequests(1, 16, 4, static_cast<int>(c->vocab_size))); !warm.ok()) {
    return warm.status();
  }
  std::vector<int> batches = z.decode_batches;
  if (kernels == cuda::KernelSet::kReference && batches.size() > 2) batches = {batches.front(), batches[batches.size() / 2]};
  if (kernels == cuda::KernelSet::kFast && !programmatic && batches.size() > 2) batches = {batches[0], batches[1]};
  const std::string set = kernels == cuda::KernelSet::kFast && !programmatic
                              ? "fast kernels, PDL off"
                              : absl::StrCat(cuda::KernelSetName(kernels), " kernels");
  for (int batch : batches) {
    const std::vector<GenerationRequest> requests = FixedRequests(batch, prompt, outputs, static_cast<int>(c->vocab_size));
    absl::StatusOr<std::vector<GenerationResult>> results = serving->engine->Generate(requests);
    if (!results.ok()) return results.status();
    const GenerationStats& st = serving->engine->last_stats();
    const double steps = double(st.decode_tokens) / batch;
    if (steps < 1) return absl::InternalError(absl::StrCat("batch ", batch, ": no decode-only step was timed"));
    const double s = st.decode_seconds / steps;
    const double floor = (weight_bytes + double(batch) * (prompt + outputs / 2) * kv_bytes_per_token) / bw;
    char line[320];
    std::snprintf(line, sizeof line,
                  "| %s | decode batch %d, ctx %d..%d (%s, GPU sampler, %s; %.0f steps) | %.3f ms/step | %.3f ms | %.0f%% |\n",
                  name.c_str(), batch, prompt, prompt + outputs, z.smoke ? "eager" : "graphs", set.c_str(), steps,
                  s * 1e3, floor * 1e3, 100 * floor / s);
    table << line;
  }
  return absl::OkStatus();
}

// Decode and prefill of whole models next to their floors (see the top).
absl::Status ModelSection(const Sizes& z, const std::filesystem::path& dir, const std::string& name, double bw,
                          double flops, std::ostream& table) {
  const int64_t weight_bytes = DirBytes(dir, ".safetensors");
  TPSERVE_RETURN_IF_ERROR(ServedDecodeRows(z, dir, name, bw, weight_bytes, cuda::KernelSet::kFast, true, table));
  TPSERVE_RETURN_IF_ERROR(ServedDecodeRows(z, dir, name, bw, weight_bytes, cuda::KernelSet::kFast, false, table));
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
  return absl::OkStatus();
}

int Run(int argc, char** argv) {
  std::string models, out_path = "bench/results/gpu_bench.md";
  std::string sections = "gemv,attention,prefill-attention,sampler,models,throughput";
  int throughput_seqs = 256;
  Sizes z;
  std::filesystem::path workdir = std::filesystem::temp_directory_path();
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--smoke") {
      z = Sizes::Smoke();
      --i;  // no value
      continue;
    }
    if (i + 1 == argc) { std::fprintf(stderr, "%s needs a value\n", k.c_str()); return 2; }
    if (k == "--models") models = argv[i + 1];
    else if (k == "--out") out_path = argv[i + 1];
    else if (k == "--workdir") workdir = argv[i + 1];
    else if (k == "--sections") sections = argv[i + 1];
    else if (k == "--throughput-seqs") throughput_seqs = std::max(1, std::atoi(argv[i + 1]));
    else { std::fprintf(stderr, "unknown option %s; see the comment at the top of gpu_bench.cc\n", k.c_str()); return 2; }
  }
  if (models.empty()) models = z.models;
  if (cuda::DeviceCount() == 0) {
    std::fprintf(stderr, "gpu_bench: no CUDA device present; run it on a machine with a GPU\n");
    return 1;
  }
  const auto wants = [&](absl::string_view section) {
    for (absl::string_view s : absl::StrSplit(sections, ',', absl::SkipEmpty())) {
      if (s == section) return true;
    }
    return false;
  };
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::ostringstream table;
  const auto flush = [&] {  // the whole table so far, after every section
    if (std::filesystem::path(out_path).has_parent_path()) {
      std::filesystem::create_directories(std::filesystem::path(out_path).parent_path());
    }
    std::ofstream(out_path) << table.str();
  };
  const double bw = CopyBandwidth(z.copy_bytes), flops = GemmFlops(z.gemm_n);
  table << "# tpserve GPU benchmark on " << prop.name << "\n\n"
        << "copy bandwidth (cudaMemcpy D2D, read+write): " << bw / 1e9 << " GB/s\n"
        << "bf16 GEMM 8192^3 (cuBLAS): " << flops / 1e12 << " TFLOP/s\n";
  flush();
  std::vector<std::filesystem::path> made;
  const auto model_dir = [&](const std::string& preset) -> absl::StatusOr<std::filesystem::path> {
    for (const std::filesystem::path& dir : made) {  // written earlier in this run
      if (dir.filename() == "tpserve_gpu_bench_" + preset) return dir;
    }
    absl::StatusOr<std::filesystem::path> dir = PresetModel(workdir, preset);
    if (dir.ok()) made.push_back(*dir);
    return dir;
  };
  int rc = 0;
  if (wants("gemv")) {
    std::fprintf(stderr, "gpu_bench: small-batch Linear, GEMV vs cuBLAS\n");
    if (!GemvSection(z, bw, table)) rc = 1;
    flush();
  }
  if (wants("attention")) {
    std::fprintf(stderr, "gpu_bench: decode attention, fast vs reference kernels\n");
    if (!AttentionSplitSection(z, bw, table)) rc = 1;
    flush();
    std::fprintf(stderr, "gpu_bench: decode attention at GQA 4 and 8, tensor-core vs SIMT vs reference\n");
    if (!AttentionVariantSection(z, bw, table)) rc = 1;
    flush();
  }
  if (wants("prefill-attention")) {
    std::fprintf(stderr, "gpu_bench: tensor-core vs reference prefill attention\n");
    if (!PrefillAttentionSection(z, table)) rc = 1;
    flush();
  }
  if (wants("sampler")) {
    std::fprintf(stderr, "gpu_bench: GPU sampler, sliced vs row kernel\n");
    if (!SamplerSection(z, table)) rc = 1;
    flush();
  }
  if (wants("models")) {
    table << "\n## Whole models (fast kernels: decode attention through cuda/decode_attention.cuh)\n\n"
          << "Decode rows: the served path (Engine step runner, CUDA graphs, GPU sampler). Prefill rows: one eager"
          << " Model::Forward (its [S, V] logits copied back).\n\n"
          << "| model | case | measured | floor | share of floor |\n|---|---|---|---|---|\n";
    for (absl::string_view preset : absl::StrSplit(models, ',', absl::SkipEmpty())) {
      std::fprintf(stderr, "gpu_bench: model %s\n", std::string(preset).c_str());
      absl::StatusOr<std::filesystem::path> dir = model_dir(std::string(preset));
      absl::Status st = dir.ok() ? ModelSection(z, *dir, std::string(preset), bw, flops, table) : dir.status();
      if (!st.ok()) {
        table << "| " << preset << " | failed: " << st.ToString() << " | | | |\n";
        rc = 1;
      }
      flush();
    }
  }
  if (wants("throughput")) {
    std::fprintf(stderr, "gpu_bench: offline throughput, %d sequences\n", throughput_seqs);
    absl::StatusOr<std::filesystem::path> dir = model_dir(z.smoke ? "tiny" : "qwen3-0.6b");
    if (dir.ok()) {
      if (!ThroughputSection(z, *dir, throughput_seqs, table)) rc = 1;
    } else {
      table << "\nthroughput: could not write the qwen3-0.6b model: " << dir.status().ToString() << "\n";
      rc = 1;
    }
    flush();
  }
  for (const std::filesystem::path& dir : made) std::filesystem::remove_all(dir);
  std::printf("%s", table.str().c_str());
  std::printf("\nwritten to %s\n", out_path.c_str());
  return rc;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Run(argc, argv); }
