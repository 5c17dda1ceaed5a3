// End to end: the decoder on the CUDA backend against the CPU backend on small
// generated models of each family, with teacher forcing (both are fed the CPU's
// greedy tokens) for 32 decode steps after a batched prefill (8 in the
// emulated run, label cuda-emu; eager steps here: cuda_graph_test.cc runs
// them as CUDA graphs); and tensor parallelism (tp = 2 ranks on one GPU, as threads, through
// the host-staged gloo communicator) against tp = 1, emulated too: each rank's
// gate/up shard pairs its gate row f with its up row F/2 + f in the fused
// LinearSiluMul. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu_backend.h"
#include "comm/communicator.h"
#include "cuda/cuda_backend.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_model.h"
#include "tests/cuda/test_sizes.h"
#include "worker/kv_cache.h"
#include "worker/model.h"
#if TPSERVE_WITH_GLOO
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#endif

namespace tpserve {
namespace {

constexpr int kSteps = cuda_test::kModelDecodeSteps;
constexpr int32_t kBlockSize = 16;
const std::vector<std::vector<int32_t>> kPrompts = {{17, 4, 99, 250, 3, 61, 8}, {201, 5}};

struct ModelCase {
  const char* name;
  const char* args;  // tpserve-make-model options
};
// gtest prints a parameter with this (instead of its bytes) in test listings.
void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }
const ModelCase kModels[] = {
    {"qwen3", "--arch qwen3 --hidden 256 --intermediate 512 --layers 2 --heads 8 --kv-heads 4 "
              "--head-dim 64 --vocab 1001 --dtype bf16 --tie 0 --seed 31"},
    {"llama", "--arch llama --hidden 256 --intermediate 384 --layers 2 --heads 4 --kv-heads 2 "
              "--vocab 517 --dtype bf16 --tie 1 --seed 32 --rope-scaling llama3"},
};

std::filesystem::path MakeTestModel(const ModelCase& c) {
  return cuda_test::MakeTestModel("tpserve_cuda_model", c.name, c.args);
}

// One step (backend/step_batch.h). Sequence s uses blocks [s·kBlocksPerSeq, ...).
constexpr int32_t kBlocksPerSeq = 4;  // 64 tokens: prompt + 32 steps fit
// tokens[s]: sequence s's new tokens, the first at position starts[s].
StepBatch MakeStep(const std::vector<std::vector<int32_t>>& tokens, const std::vector<int32_t>& starts) {
  std::vector<std::vector<int32_t>> tables(tokens.size());
  std::vector<StepSequence> seqs;
  for (size_t s = 0; s < tokens.size(); ++s) {
    for (int32_t b = 0; b < kBlocksPerSeq; ++b) tables[s].push_back(static_cast<int32_t>(s) * kBlocksPerSeq + b);
    seqs.push_back({tokens[s], starts[s], tables[s]});
  }
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, kBlockSize);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? *std::move(step) : StepBatch();
}

// Runs the prompts and kSteps decode steps; returns rank 0's logits of every
// step ([S · V] each). When *forced is empty it is filled with the greedy tokens
// ([step][seq]); otherwise those tokens are fed.
std::vector<std::vector<float>> RunTeacherForced(Model& model, Backend& backend,
                                                 std::vector<std::vector<int32_t>>* forced) {
  const int64_t S = static_cast<int64_t>(kPrompts.size());
  absl::StatusOr<KvCache> cache = KvCache::Allocate(backend, model.kv_cache_shape(S * kBlocksPerSeq, kBlockSize));
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return {};
  const bool record = forced->empty();
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> lens;
  for (const auto& p : kPrompts) lens.push_back(static_cast<int32_t>(p.size()));
  for (int step = 0; step <= kSteps; ++step) {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<int32_t> starts;
    for (int64_t s = 0; s < S; ++s) {
      if (step == 0) {
        tokens.push_back(kPrompts[s]);
        starts.push_back(0);
      } else {
        tokens.push_back({(*forced)[step - 1][s]});
        starts.push_back(lens[s]++);
      }
    }
    const StepBatch st = MakeStep(tokens, starts);
    absl::StatusOr<std::optional<Logits>> out = model.Forward(st.view(), *cache);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    if (!out->has_value()) {  // not rank 0
      logits.emplace_back();
      continue;
    }
    const Logits& l = **out;
    logits.push_back(l.values);
    if (record && step < kSteps) {
      std::vector<int32_t> next;
      for (int64_t s = 0; s < S; ++s) {
        const auto row = l.row(s);
        next.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
      }
      forced->push_back(next);
    }
  }
  return logits;
}

std::unique_ptr<Model> LoadModel(const std::filesystem::path& dir, Backend& backend, Communicator& comm) {
  ModelOptions options;
  options.max_num_tokens = 64;
  options.max_num_seqs = 4;
  options.max_position = 256;
  options.max_num_logits_rows = 8;  // a verification step's rows (VerificationRowsFollowTheCpuBackend)
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(dir, backend, comm, options);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

class CudaModelTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CudaModelTest, LogitsFollowTheCpuBackendForTeacherForcedDecodeSteps) {
  TPSERVE_REQUIRE_GPU();
  const std::filesystem::path dir = MakeTestModel(GetParam());
  std::unique_ptr<Backend> cpu = MakeCpuBackend(), gpu = MakeCudaBackend(0);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  std::unique_ptr<Model> cpu_model = LoadModel(dir, *cpu, *solo), gpu_model = LoadModel(dir, *gpu, *solo);
  ASSERT_TRUE(cpu_model && gpu_model);
  std::vector<std::vector<int32_t>> forced;
  const auto want = RunTeacherForced(*cpu_model, *cpu, &forced);
  const auto got = RunTeacherForced(*gpu_model, *gpu, &forced);
  ASSERT_EQ(got.size(), want.size());
  const int64_t V = cpu_model->config().vocab_size;
  int clear = 0, agree = 0;
  for (size_t step = 0; step < want.size(); ++step) {
    cuda_test::ExpectClose(got[step], want[step], 2e-2, "step " + std::to_string(step));
    for (size_t s = 0; s < kPrompts.size(); ++s) {
      std::vector<float> row(want[step].begin() + s * V, want[step].begin() + (s + 1) * V);
      std::vector<float> sorted = row;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      double rms = 0;
      for (float x : row) rms += double{x} * x;
      rms = std::sqrt(rms / V);
      if (sorted[0] - sorted[1] < 0.1 * rms) continue;  // top-2 too close for bf16 to call
      ++clear;
      const auto g = got[step].begin() + s * V;
      const int64_t gpu_best = std::max_element(g, g + V) - g;
      const int64_t cpu_best = std::max_element(row.begin(), row.end()) - row.begin();
      agree += gpu_best == cpu_best;
      EXPECT_EQ(gpu_best, cpu_best) << "step " << step << " seq " << s;
    }
  }
  EXPECT_GT(clear, 0) << "no step had a clear greedy token: the check proved nothing";
  std::filesystem::remove_all(dir);
}

#if TPSERVE_WITH_GLOO
// tp = 2 ranks on one GPU (two threads, each with its own CUDA backend and gloo
// communicator; device tensors are staged through the host) give tp = 1's logits.
// Decode steps of 4 sequences run the fast set's fused gate/up GEMV on each
// rank's [2F/2, D] shard: a gate row paired with the wrong up row would move
// the logits far beyond the tolerance.
// Speculative verification (backend/step.h, issue 27): a step that carries a
// decoding sequence's last token and 4 proposed ones, with a logits row for
// each, gives on the GPU the rows the CPU gives, as the one-token steps do.
TEST_P(CudaModelTest, VerificationRowsFollowTheCpuBackend) {
  TPSERVE_REQUIRE_GPU();
  const std::filesystem::path dir = MakeTestModel(GetParam());
  std::unique_ptr<Backend> cpu = MakeCpuBackend(), gpu = MakeCudaBackend(0);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  std::unique_ptr<Model> cpu_model = LoadModel(dir, *cpu, *solo), gpu_model = LoadModel(dir, *gpu, *solo);
  ASSERT_TRUE(cpu_model && gpu_model);
  const std::vector<int32_t>& prompt = kPrompts[0];
  const std::vector<int32_t> table{3, 0, 2, 1};
  const std::vector<int32_t> checked{5, 77, 5, 300, 12};  // the last token, then 4 proposals
  auto run = [&](Model& model, Backend& backend) {
    absl::StatusOr<KvCache> cache = KvCache::Allocate(backend, model.kv_cache_shape(4, kBlockSize));
    EXPECT_TRUE(cache.ok()) << cache.status();
    std::vector<float> rows;
    if (!cache.ok()) return rows;
    for (const StepSequence& seq : {StepSequence{prompt, 0, table}, StepSequence{checked, 7, table, 5}}) {
      absl::StatusOr<StepBatch> step = StepBatch::Build(std::span<const StepSequence>(&seq, 1), kBlockSize);
      EXPECT_TRUE(step.ok()) << step.status();
      absl::StatusOr<std::optional<Logits>> out = model.Forward(step->view(), *cache);
      EXPECT_TRUE(out.ok() && out->has_value()) << out.status();
      if (!out.ok() || !out->has_value()) return std::vector<float>{};
      rows = (*out)->values;
    }
    return rows;
  };
  const std::vector<float> want = run(*cpu_model, *cpu), got = run(*gpu_model, *gpu);
  ASSERT_EQ(want.size(), static_cast<size_t>(5 * cpu_model->config().vocab_size));
  cuda_test::ExpectClose(got, want, 2e-2, "verification rows");
  std::filesystem::remove_all(dir);
}

TEST(CudaTensorParallelTest, TwoRanksOnOneGpuThroughGlooMatchOneRank) {
  TPSERVE_REQUIRE_GPU();
  // Emulated: the smaller Llama (the run takes seconds, not tens of them).
  const std::filesystem::path dir = MakeTestModel(kModels[cuda_test::kEmulated ? 1 : 0]);
  std::unique_ptr<Backend> cpu = MakeCpuBackend(), gpu = MakeCudaBackend(0);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  std::vector<std::vector<int32_t>> forced;
  {
    std::unique_ptr<Model> cpu_model = LoadModel(dir, *cpu, *solo);
    ASSERT_TRUE(cpu_model);
    RunTeacherForced(*cpu_model, *cpu, &forced);  // the tokens both runs are fed
  }
  std::unique_ptr<Model> one = LoadModel(dir, *gpu, *solo);
  ASSERT_TRUE(one);
  const auto want = RunTeacherForced(*one, *gpu, &forced);

  const std::filesystem::path store_dir = dir / "store";
  std::vector<std::vector<std::vector<float>>> got(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(store_dir.string());
      ASSERT_TRUE(store.ok()) << store.status();
      absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeGlooCommunicator(**store, rank, 2);
      ASSERT_TRUE(comm.ok()) << comm.status();
      std::unique_ptr<Backend> backend = MakeCudaBackend(0);
      std::unique_ptr<Model> model = LoadModel(dir, *backend, **comm);
      ASSERT_TRUE(model);
      std::vector<std::vector<int32_t>> tokens = forced;
      got[rank] = RunTeacherForced(*model, *backend, &tokens);
    });
  }
  for (std::thread& t : ranks) t.join();
  ASSERT_EQ(got[0].size(), want.size());
  for (size_t step = 0; step < want.size(); ++step) {
    cuda_test::ExpectClose(got[0][step], want[step], 2e-2, "step " + std::to_string(step));
  }
  std::filesystem::remove_all(dir);
}
#endif

INSTANTIATE_TEST_SUITE_P(Families, CudaModelTest, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<ModelCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tpserve
