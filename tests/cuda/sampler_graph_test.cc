// The GPU sampler inside the served decode path: a whole tiny model through
// the Engine (StepRunner over the CUDA backend, the fast kernel set,
// CudaSampler on the backend's stream), decode steps as CUDA graphs with the
// sampler's decode-batch graphs (cuda/cuda_sampler.h) against the same model
// with enforce_eager, on seeded sampling (temperature + top-p, top-k, min-p,
// greedy; one request with penalties and one with log-probs, whose steps fall
// back to the eager sampler after the forward's graph). The forward is the
// same kernels either way and the sampler's tokens do not depend on the path,
// so every token must be equal. Vocabulary 2,053 (>= 2 slices of 1,024 ids:
// the sliced path runs). Skips without a GPU; the emulated run (label
// cuda-emu) takes fewer tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_model.h"
#include "tests/cuda/test_sizes.h"
#include "worker/engine.h"

namespace tpserve {
namespace {

constexpr int kTokens = cuda_test::kEmulated ? 4 : 64;

std::vector<GenerationRequest> Requests(int64_t vocab) {
  std::mt19937 rng(11);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 7; ++i) {
    GenerationRequest r;
    const int len = cuda_test::kEmulated ? 2 + i : 3 + 5 * i;
    for (int t = 0; t < len; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
    SamplingParams& p = r.sampling;
    p.seed = 1000 + static_cast<uint64_t>(i);
    if (i == 0) p.temperature = 0.7f, p.top_p = 0.9f;  // issue 12's case
    if (i == 1) p.temperature = 0.0f;
    if (i == 2) p.top_k = 20;
    if (i == 3) p.min_p = 0.1f, p.temperature = 1.5f;
    if (i == 4) p.temperature = 0.9f, p.top_p = 0.95f, p.top_k = 100, p.min_p = 0.02f;
    if (i == 5) p.temperature = 0.8f, p.repetition_penalty = 1.2f;  // the row kernel
    if (i == 6) p.top_p = 0.9f, p.logprobs = 2;                     // the row kernel
    r.max_tokens = kTokens;
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  return requests;
}

struct EngineRun {
  std::vector<GenerationResult> covered;  // requests 0..4 alone: every decode step sliced
  std::vector<GenerationResult> all;      // then all 7: steps with rows the sliced path does not cover
  int64_t covered_graph_calls = 0;        // the sampler's graph calls after the first batch
  int64_t sampler_graph_calls = 0;        // and after both
};

// Through one engine: requests 0..4, then all of them.
EngineRun Generate(const std::filesystem::path& dir, bool eager, const std::vector<GenerationRequest>& requests) {
  EngineRun run;
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  std::unique_ptr<Backend> backend = MakeCudaBackend(0, cuda::KernelSet::kFast);
  cuda::CudaSampler::Options sampler_options;
  sampler_options.max_seqs = 8;
  sampler_options.vocab_size = 2053;
  sampler_options.max_logprobs = 4;
  sampler_options.sm_count = 132;  // an H200's plan, so batches up to 8 slice (the emulator has 1 SM)
  absl::StatusOr<std::unique_ptr<cuda::CudaSampler>> sampler =
      cuda::CudaSampler::Create(sampler_options, static_cast<cudaStream_t>(backend->stream()));
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  if (!sampler.ok()) return run;
  EngineOptions options;
  options.model.max_position = 1024;
  options.model.max_num_seqs = 8;
  options.sampler = sampler->get();
  options.enforce_eager = eager;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(dir, *backend, *solo, options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return run;
  absl::StatusOr<std::vector<GenerationResult>> covered =
      (*engine)->Generate(std::span<const GenerationRequest>(requests).first(5));
  EXPECT_TRUE(covered.ok()) << covered.status();
  if (covered.ok()) run.covered = *std::move(covered);
  run.covered_graph_calls = (*sampler)->graph_calls();
  absl::StatusOr<std::vector<GenerationResult>> all = (*engine)->Generate(requests);
  EXPECT_TRUE(all.ok()) << all.status();
  if (all.ok()) run.all = *std::move(all);
  run.sampler_graph_calls = (*sampler)->graph_calls();
  return run;
}

TEST(SamplerGraphTest, GraphsWithTheSamplerGiveTheEagerTokens) {
  TPSERVE_REQUIRE_GPU();
  const std::filesystem::path dir = cuda_test::MakeTestModel(
      "tpserve_sampler_graph", "qwen3_tiny",
      "--arch qwen3 --hidden 64 --intermediate 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 "
      "--vocab 2053 --seed 63 --max-pos 1024");
  const std::vector<GenerationRequest> requests = Requests(2053);
  const EngineRun eager = Generate(dir, true, requests);
  const EngineRun graphs = Generate(dir, false, requests);
  ASSERT_EQ(eager.covered.size(), 5u);
  ASSERT_EQ(graphs.covered.size(), 5u);
  ASSERT_EQ(eager.all.size(), requests.size());
  ASSERT_EQ(graphs.all.size(), requests.size());
  EXPECT_EQ(eager.sampler_graph_calls, 0);
  // The first batch's decode steps (5 rows: bucket 8, 3 padding rows) sample
  // as graphs; the second's, holding a penalised and a log-prob row, fall back.
  // (Each batch prefills in one step, then decodes all its requests together.)
  EXPECT_EQ(graphs.covered_graph_calls, kTokens - 1);
  EXPECT_EQ(graphs.sampler_graph_calls, graphs.covered_graph_calls);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i < 5) {
      EXPECT_EQ(graphs.covered[i].tokens, eager.covered[i].tokens) << "request " << i << " alone";
      EXPECT_EQ(graphs.covered[i].tokens.size(), size_t{kTokens});
    }
    EXPECT_EQ(graphs.all[i].tokens, eager.all[i].tokens) << "request " << i << " with all";
    EXPECT_EQ(graphs.all[i].tokens.size(), size_t{kTokens});
    EXPECT_EQ(graphs.all[i].logprobs.size(), eager.all[i].logprobs.size()) << "request " << i;
  }
  std::printf("sampler graph calls: %lld in the first batch, %lld in all\n",
              static_cast<long long>(graphs.covered_graph_calls), static_cast<long long>(graphs.sampler_graph_calls));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpserve
