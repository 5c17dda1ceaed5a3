// CudaSampler::Sample per step on random bf16 logits (the gathered LM head of
// a Llama-3 vocabulary), for a few parameter mixes; a markdown table on
// stdout, and a second for token-level controls at batch 64 against none.
// Includes the uploads, the kernel, the read-back and the sync, as a step
// pays them. Exits 0 with a note when there is no GPU.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_sampler.h"
#include "model/dtype.h"
#include "sampling/sampler.h"
#include "sampling/token_controls.h"

namespace {

using tpserve::SamplingParams;
using tpserve::SequenceSamplingState;

double MsPerStep(tpserve::cuda::CudaSampler& sampler, const tpserve::Tensor& gathered,
                 int64_t vocab, const SamplingParams& params, int rows) {
  std::vector<std::unique_ptr<SequenceSamplingState>> seqs;
  std::vector<SequenceSamplingState*> ptrs;
  std::vector<int32_t> prompt(512);
  for (int32_t i = 0; i < 512; ++i) prompt[i] = (i * 7919) % static_cast<int32_t>(vocab);
  for (int s = 0; s < rows; ++s) {
    SamplingParams p = params;
    p.seed = s;
    seqs.push_back(std::make_unique<SequenceSamplingState>(p, prompt));
    ptrs.push_back(seqs.back().get());
  }
  sampler.Sample(gathered, vocab, ptrs);  // warm-up
  const int iters = 20;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) sampler.Sample(gathered, vocab, ptrs);
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iters;
}

// Token-level controls at batch 64 (issue 29: goal <= 5% over no controls):
// logit_bias of 300 entries, allowed_token_ids of 1,000, on the first 64 rows.
void ControlsSection(tpserve::cuda::CudaSampler& sampler, void* device, int64_t vocab) {
  const int rows = 64;
  const tpserve::Tensor gathered(device, tpserve::DType::kBF16, tpserve::Device::kCuda, {1, rows, vocab});
  std::mt19937_64 rng(29);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(vocab) - 1);
  tpserve::TokenControls biased, allowed;
  while (biased.logit_bias.size() < 300) {
    biased.logit_bias.emplace_back(any(rng), 2.0f);
    tpserve::NormalizeTokenControls(biased);
  }
  while (allowed.allowed_token_ids.size() < 1000) {
    allowed.allowed_token_ids.push_back(any(rng));
    tpserve::NormalizeTokenControls(allowed);
  }
  SamplingParams base;
  base.temperature = 0.8f, base.top_p = 0.95f;
  SamplingParams with_bias = base, with_allowed = base;
  with_bias.controls = std::make_shared<const tpserve::TokenControls>(biased);
  with_allowed.controls = std::make_shared<const tpserve::TokenControls>(allowed);
  const double none = MsPerStep(sampler, gathered, vocab, base, rows);
  const double bias_ms = MsPerStep(sampler, gathered, vocab, with_bias, rows);
  const double allowed_ms = MsPerStep(sampler, gathered, vocab, with_allowed, rows);
  std::printf("\n| CudaSampler::Sample, S = %d, T 0.8, top_p 0.95 | ms / step | vs none |\n|---|---|---|\n", rows);
  std::printf("| no controls | %.3f | 1.000x |\n", none);
  std::printf("| logit_bias 300 | %.3f | %.3fx |\n", bias_ms, bias_ms / none);
  std::printf("| allowed_token_ids 1000 | %.3f | %.3fx |\n", allowed_ms, allowed_ms / none);
}

}  // namespace

int main() {
  if (tpserve::cuda::DeviceCount() == 0) {
    std::printf("sampling_bench: no CUDA device, skipped\n");
    return 0;
  }
  const int rows = 256, tp = 1;
  const int64_t vocab = 128256;
  std::vector<uint16_t> host(static_cast<size_t>(tp) * rows * vocab);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (uint16_t& x : host) x = tpserve::FloatToBf16(normal(rng));
  void* device = nullptr;
  CUDA_CHECK(cudaMalloc(&device, host.size() * sizeof(uint16_t)));
  CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  const tpserve::Tensor gathered(device, tpserve::DType::kBF16, tpserve::Device::kCuda,
                                 {tp, rows, vocab});
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto sampler = tpserve::cuda::CudaSampler::Create({rows, vocab, 20, 0}, stream);
  if (!sampler.ok()) {
    std::fprintf(stderr, "sampling_bench: %s\n", std::string(sampler.status().message()).c_str());
    return 1;
  }
  struct Mix {
    const char* name;
    SamplingParams params;
  };
  std::vector<Mix> mixes(5);
  mixes[0].name = "greedy";
  mixes[0].params.temperature = 0;
  mixes[1].name = "temperature 0.8";
  mixes[1].params.temperature = 0.8f;
  mixes[2].name = "T 0.8, top_p 0.9";
  mixes[2].params.temperature = 0.8f, mixes[2].params.top_p = 0.9f;
  mixes[3].name = "T 0.8, min_p 0.05, top_k 50, top_p 0.9, logprobs 5";
  mixes[3].params.temperature = 0.8f, mixes[3].params.min_p = 0.05f, mixes[3].params.top_k = 50,
  mixes[3].params.top_p = 0.9f, mixes[3].params.logprobs = 5;
  mixes[4].name = "penalties (512-token prompt), T 0.8";
  mixes[4].params.temperature = 0.8f, mixes[4].params.repetition_penalty = 1.1f,
  mixes[4].params.frequency_penalty = 0.2f, mixes[4].params.presence_penalty = 0.2f;
  std::printf("| CudaSampler::Sample, S = %d, V = %lld, bf16 | ms / step |\n|---|---|\n", rows,
              static_cast<long long>(vocab));
  for (const Mix& m : mixes) {
    std::printf("| %s | %.3f |\n", m.name, MsPerStep(**sampler, gathered, vocab, m.params, rows));
  }
  ControlsSection(**sampler, device, vocab);
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(device));
  return 0;
}
