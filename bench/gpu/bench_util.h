// What the sections of bench/gpu/gpu_bench.cc share: the sizes of a run, the
// timer, the bench's block size and step, and the kernel-level sections
// (kernel_sections.cc), each of which appends its markdown table to `table`
// and returns false (after saying why in the table) when a launch fails.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "backend/step_batch.h"
#include "cuda/check.h"

namespace tpserve::gpu_bench {

constexpr int32_t kBlockSize = 16;

// Every size the bench uses. Full: the numbers of the top comment. --smoke:
// tiny everything (decode graphs for a 4-sequence server), for the cuda-emu
// test that runs this program through the kernels' host build and its
// emulated graph capture.
struct Sizes {
  bool smoke = false;
  size_t copy_bytes = size_t{1} << 30;
  int gemm_n = 8192;
  int warmup = 3, iters = 20;                // model and attention timings
  std::vector<int32_t> attention_contexts{512, 1024, 4096, 8192, 32768}, attention_batches{1, 8, 64, 256};
  std::vector<int32_t> prefill_attention_prompts{512, 2048, 8192};
  // Mixed steps (continuous batching: one prompt chunk beside running
  // decodes): the prompt lengths above with this many decodes of this context.
  int mixed_decodes = 64, mixed_decode_context = 1024;
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
  int64_t max_num_seqs = 256;  // the serving engine's (decode graphs are captured up to it)
  // Where the targets (Target below) are read: the model of the batch-1 decode
  // row, and the attention rows' batch and shortest context.
  std::string target_model = "qwen3-0.6b";
  int32_t target_attention_batch = 64, target_min_context = 1024;

  static Sizes Smoke() {
    Sizes z;
    z.smoke = true;
    z.copy_bytes = size_t{1} << 20, z.gemm_n = 64, z.warmup = 0, z.iters = 1;
    z.attention_contexts = {600}, z.attention_batches = {1, 2};  // two 512-key partitions
    z.prefill_attention_prompts = {70};                          // two 64-row query tiles
    z.mixed_decodes = 3, z.mixed_decode_context = 600;
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
    z.max_num_seqs = 4;
    z.det_rows = {1, 3}, z.det_attention_batch = 2, z.det_contexts = {600}, z.det_prefill = 70;
    z.det_decode_batches = {1, 3};
    z.target_model = "tiny", z.target_attention_batch = 2, z.target_min_context = 600;  // the paths run, unjudged
    return z;
  }
  // The deterministic section (deterministic_section.cc) and served rows.
  std::vector<int64_t> det_rows{1, 8, 64, 256};   // Linear's M
  int det_attention_batch = 64;
  std::vector<int32_t> det_contexts{1024, 4096};
  int32_t det_prefill = 2048;
  std::vector<int> det_decode_batches{1, 64};     // served decode rows (the target is at batch 64)
  int max_attention_context() const { return *std::max_element(attention_contexts.begin(), attention_contexts.end()); }
  int max_attention_batch() const { return *std::max_element(attention_batches.begin(), attention_batches.end()); }
  int max_decode_batch() const { return *std::max_element(decode_batches.begin(), decode_batches.end()); }
};

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

// A step of `num_seqs` sequences with `new_tokens` new tokens each ending at
// position seq_len − 1; sequence s owns blocks [s · blocks_per_seq, ...).
StepBatch BenchStep(int32_t num_seqs, int32_t new_tokens, int32_t seq_len);

// Issue 12's targets on one H200 with Qwen3-0.6B shapes (targets.cc): the
// sections that measure one record it, the worst value kept, and gpu_bench
// prints the table last, so a GPU run says at once which are met.
enum class Target {
  kBatch1Decode,     // ms per served decode step, batch 1, context 512, graphs + GPU sampler: <= 0.45, then 0.35
  kDecodeAttention,  // share of the copy bandwidth, fast kernel, batch 64, context 1024..32768: >= 85%
  kThroughput,       // output tokens/s, the offline 256-sequence workload: >= 20,000
  kSampler,          // us per call, batch 1, vocabulary 151,936, temperature + top-p, as a graph: <= 15
};
void RecordTarget(Target target, double value);
// The targets' markdown table: goal, worst value recorded (or "not measured"),
// and whether it is met. Under --smoke (tiny shapes) nothing is judged.
std::string TargetsTable(bool smoke);

// Kernel-level sections (kernel_sections.cc). bw: the measured copy bandwidth (bytes/s).
bool GemvSection(const Sizes& z, double bw, std::ostream& table);
bool AttentionSplitSection(const Sizes& z, double bw, std::ostream& table);
bool AttentionVariantSection(const Sizes& z, double bw, std::ostream& table);
bool PrefillAttentionSection(const Sizes& z, std::ostream& table);
bool SamplerSection(const Sizes& z, std::ostream& table);
// A decoder layer's fused ops (Backend::FusesLayerOps) against the unfused ops
// they stand for, at the GEMV's rows, on Qwen3-0.6B's shapes.
bool FusionSection(const Sizes& z, std::ostream& table);
// The deterministic mode's GEMM and attention beside the fast set's kernels
// (deterministic_section.cc).
bool DeterministicSection(const Sizes& z, double bw, std::ostream& table);
// One eager batch-1 decode step of the model in `dir` op by op with CUDA
// events, next to its graph replay (profile_section.cc).
bool ProfileSection(const Sizes& z, const std::filesystem::path& dir, const std::string& name, std::ostream& table);

}  // namespace tpserve::gpu_bench
