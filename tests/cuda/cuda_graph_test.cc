// CUDA graphs for decode steps (worker/decode_graphs.h) on the CUDA backend:
// decode steps of 1, 3, 7 and 19 sequences (buckets 1, 4, 8, 32) replayed as
// graphs give the same logits as the same padded step run eagerly, and follow
// the unpadded eager step within bf16 tolerance, for several steps on a
// generated Qwen3 and Llama model, with short contexts and with contexts that
// cross a decode-attention partition between replays; and the static step buffers reject a step
// beyond the reserved capacity. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "cuda/cuda_backend.h"
#include "backend/step_batch.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_model.h"
#include "worker/decode_graphs.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int kSteps = 8;

// The sizes of one run of decode graphs.
struct GraphRun {
  std::vector<int> batches;   // sequences per step
  int min_prompt, max_prompt;  // random prompt lengths
  int32_t blocks_per_seq;      // >= (max_prompt + kSteps) / kBlockSize
  int64_t max_position;        // the reserved context (the graphs' fixed decode-attention plan)
  // Graph against the same padded step run eagerly. The eager step plans its
  // decode attention for its own contexts, the graph for max_position
  // (cuda/decode_plan.h); when those plans cut the context differently the
  // fp32 sums run in another order, so bf16 tolerance.
  double padded_tol;
};

// Contexts up to 48 keys: every plan is one partition, so the graph and the
// padded eager step run the same arithmetic.
const GraphRun kShortContexts{{1, 3, 7, 19}, 1, 24, 3, 256, 1e-3};
// Contexts 250 .. 274 under a graph planned for 1024 keys: 256-key partitions
// over several blocks, so replays cross from one used block (output written
// directly) to two (partials and the combine) inside one captured grid.
const GraphRun kAcrossPartitions{{1, 3}, 250, 258, 17, 1024, 2e-2};

struct ModelCase {
  const char* name;
  const char* args;  // tpserve-make-model options
};
const ModelCase kModels[] = {
    {"qwen3", "--arch qwen3 --hidden 256 --intermediate 512 --layers 2 --heads 8 --kv-heads 4 "
              "--head-dim 64 --vocab 1001 --dtype bf16 --tie 0 --seed 41"},
    {"llama", "--arch llama --hidden 256 --intermediate 384 --layers 2 --heads 4 --kv-heads 2 "
              "--vocab 517 --dtype bf16 --tie 1 --seed 42 --rope-scaling llama3"},
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

std::filesystem::path MakeTestModel(const ModelCase& c) {
  return cuda_test::MakeTestModel("tpserve_cuda_graph", c.name, c.args);
}

// One step (backend/step_batch.h): sequence s has tokens[s] new tokens ending
// at lens[s] and blocks tables[s].
StepBatch MakeStep(const std::vector<std::vector<int32_t>>& tokens, const std::vector<int32_t>& lens,
                   const std::vector<std::vector<int32_t>>& tables) {
  std::vector<StepSequence> seqs;
  for (size_t s = 0; s < tokens.size(); ++s) seqs.push_back({tokens[s], lens[s] - std::ssize(tokens[s]), tables[s]});
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, kBlockSize);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? *std::move(step) : StepBatch();
}

// Captures decode graphs once per batch size and replays them for kSteps
// steps of growing contexts, against the padded and unpadded eager steps.
void RunDecodeGraphs(const ModelCase& model_case, const GraphRun& run) {
  const uint32_t seed = cuda_test::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " (TPSERVE_TEST_SEED replays it)");
  std::mt19937 rng(seed);
  const std::filesystem::path dir = MakeTestModel(model_case);
  std::unique_ptr<Backend> gpu = MakeCudaBackend(0);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  ModelOptions options;
  // The prefill of every sequence in one step.
  options.max_num_tokens = std::max(512, *std::max_element(run.batches.begin(), run.batches.end()) * run.max_prompt);
  options.max_num_seqs = 32;
  options.max_position = run.max_position;
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::Load(dir, *gpu, *solo, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Model& model = **loaded;
  ASSERT_TRUE(DecodeGraphs::Supported(*gpu, *solo, model));
  const StepCapacity capacity = StepCapacityFor(model, kBlockSize);
  ASSERT_TRUE(gpu->Reserve(capacity).ok());
  const int64_t V = model.config().vocab_size;

  for (int S : run.batches) {
    SCOPED_TRACE(testing::Message() << "batch " << S);
    const int32_t blocks_per_seq = run.blocks_per_seq;
    const int64_t num_blocks = int64_t{S} * blocks_per_seq;
    // Three caches with the same history: the graphs', the padded eager
    // step's and the unpadded eager step's.
    absl::StatusOr<KvCache> graph_cache = KvCache::Allocate(*gpu, model.kv_cache_shape(num_blocks, kBlockSize));
    absl::StatusOr<KvCache> padded_cache = KvCache::Allocate(*gpu, model.kv_cache_shape(num_blocks, kBlockSize));
    absl::StatusOr<KvCache> plain_cache = KvCache::Allocate(*gpu, model.kv_cache_shape(num_blocks, kBlockSize));
    ASSERT_TRUE(graph_cache.ok() && padded_cache.ok() && plain_cache.ok());
    DecodeGraphs graphs(model, *graph_cache, *gpu, capacity);
    const absl::Status captured = graphs.Capture();
    ASSERT_TRUE(captured.ok()) << captured;
    ASSERT_TRUE(graphs.captured());
    const int32_t bucket = DecodeGraphBucket(graphs.batch_sizes(), S);
    ASSERT_EQ(bucket, S == 1 ? 1 : S == 3 ? 4 : S == 7 ? 8 : 32);

    // Prefill: random prompts of run.min_prompt .. run.max_prompt tokens in scattered blocks.
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(S)), prompts(static_cast<size_t>(S));
    std::vector<int32_t> lens;
    for (int s = 0; s < S; ++s) {
      for (int b = 0; b < blocks_per_seq; ++b) tables[static_cast<size_t>(s)].push_back(perm[static_cast<size_t>(s * blocks_per_seq + b)]);
      const int n = run.min_prompt + static_cast<int>(rng() % static_cast<uint32_t>(run.max_prompt - run.min_prompt + 1));
      for (int i = 0; i < n; ++i) prompts[static_cast<size_t>(s)].push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(V)));
      lens.push_back(n);
    }
    const StepBatch prefill = MakeStep(prompts, lens, tables);
    std::vector<int32_t> next;
    for (KvCache* cache : {&*graph_cache, &*padded_cache, &*plain_cache}) {
      absl::StatusOr<std::optional<Logits>> out = model.Forward(prefill.view(), *cache);
      ASSERT_TRUE(out.ok()) << out.status();
      if (next.empty()) {
        for (int s = 0; s < S; ++s) {
          const auto row = (*out)->row(s);
          next.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
        }
      }
    }

    for (int step = 0; step < kSteps; ++step) {
      SCOPED_TRACE(testing::Message() << "decode step " << step);
      std::vector<std::vector<int32_t>> tokens;
      for (int s = 0; s < S; ++s) {
        tokens.push_back({next[static_cast<size_t>(s)]});
        ++lens[static_cast<size_t>(s)];
      }
      const StepBatch decode = MakeStep(tokens, lens, tables);
      StepBatch padded;
      ASSERT_TRUE(padded.AssignPaddedDecode(decode.view(), bucket, capacity.max_blocks_per_seq(), kBlockSize).ok());

      absl::StatusOr<std::optional<Logits>> g = graphs.Forward(decode.view());
      ASSERT_TRUE(g.ok()) << g.status();
      absl::StatusOr<std::optional<Logits>> p = model.Forward(padded.view(), *padded_cache);
      ASSERT_TRUE(p.ok()) << p.status();
      absl::StatusOr<std::optional<Logits>> e = model.Forward(decode.view(), *plain_cache);
      ASSERT_TRUE(e.ok()) << e.status();
      ASSERT_EQ((*g)->num_seqs, S);
      ASSERT_EQ((*p)->num_seqs, bucket);
      const std::vector<float> padded_real((*p)->values.begin(), (*p)->values.begin() + S * V);
      // The graph is the padded step's kernels with the same arguments.
      cuda_test::ExpectClose((*g)->values, padded_real, run.padded_tol, "graph vs eager padded");
      // Against the unpadded step only the GEMMs' row count differs (cuBLAS
      // may pick another algorithm): bf16 tolerance.
      cuda_test::ExpectClose((*g)->values, (*e)->values, 2e-2, "graph vs eager unpadded");
      for (int s = 0; s < S; ++s) {  // teacher-force the eager step's greedy tokens
        const auto row = (*e)->row(s);
        next[static_cast<size_t>(s)] = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      }
    }
    EXPECT_EQ(graphs.replays(), kSteps);
  }
  std::filesystem::remove_all(dir);
}

class CudaGraphTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CudaGraphTest, ReplayedDecodeStepsMatchEagerSteps) {
  TPSERVE_REQUIRE_GPU();
  RunDecodeGraphs(GetParam(), kShortContexts);
}

// The fast decode attention inside a graph: one grid, fixed at capture for
// the reserved context, serves replays whose contexts cross a partition.
TEST_P(CudaGraphTest, ReplayedDecodeStepsAcrossAttentionPartitions) {
  TPSERVE_REQUIRE_GPU();
  RunDecodeGraphs(GetParam(), kAcrossPartitions);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaGraphTest, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<ModelCase>& info) { return std::string(info.param.name); });

// After Reserve the step buffers are fixed: a step with more tokens, more
// sequences or more block-table columns than reserved is INVALID_ARGUMENT,
// and a capture needs Reserve first.
TEST(CudaGraphCapacityTest, StepsBeyondTheReservedCapacityAreInvalidArgument) {
  TPSERVE_REQUIRE_GPU();
  std::unique_ptr<Backend> gpu = MakeCudaBackend(0);
  EXPECT_TRUE(gpu->SupportsGraphs());
  EXPECT_EQ(gpu->BeginCapture().code(), absl::StatusCode::kFailedPrecondition);  // before Reserve
  StepCapacity capacity;
  capacity.max_tokens = 8;
  capacity.max_seqs = 3;
  capacity.max_context = 32;
  capacity.block_size = 16;  // 2 block-table columns
  ASSERT_TRUE(gpu->Reserve(capacity).ok());
  const int64_t num_blocks = 16, max_position = 64;
  auto begin = [&](const std::vector<int32_t>& n_new, int32_t columns) {
    std::vector<std::vector<int32_t>> tokens, tables;
    std::vector<int32_t> lens;
    int32_t next_block = 0;
    for (int32_t n : n_new) {
      tokens.emplace_back(static_cast<size_t>(n), 5);
      lens.push_back(n);
      std::vector<int32_t> row(static_cast<size_t>(columns), -1);  // `columns` block-table columns
      row[0] = next_block++;
      tables.push_back(row);
    }
    const StepBatch step = MakeStep(tokens, lens, tables);
    return gpu->BeginStep(step.view(), num_blocks, 16, max_position);
  };
  EXPECT_TRUE(begin({2, 3, 3}, 2).ok());                                        // exactly the capacity
  EXPECT_EQ(begin({2, 3, 4}, 2).code(), absl::StatusCode::kInvalidArgument);    // 9 tokens > 8
  EXPECT_EQ(begin({1, 1, 1, 1}, 2).code(), absl::StatusCode::kInvalidArgument);  // 4 sequences > 3
  EXPECT_EQ(begin({2, 3}, 3).code(), absl::StatusCode::kInvalidArgument);       // 3 columns > 2
  EXPECT_TRUE(begin({1}, 1).ok());                                              // smaller steps still fit
}

}  // namespace
}  // namespace tpserve
