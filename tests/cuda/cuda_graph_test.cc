// CUDA graphs for decode steps (worker/decode_graphs.h) on the CUDA backend:
// decode steps replayed as graphs give the same logits as the same padded step
// run eagerly, and follow the unpadded eager step within bf16 tolerance, for
// several steps on a generated Qwen3 and Llama model:
//   * 1, 3, 7 and 19 sequences (buckets 1, 4, 8, 32) with short contexts;
//   * contexts that cross a decode-attention partition between replays;
//   * every bucket of a 256-sequence server (1, 2, 4, 8, 16, 32, ..., 256),
//     each filled exactly and with one sequence more than the bucket below,
//     from one set of graphs captured once, as the server replays them;
//   * contexts of 32,700 to 32,768 keys (a 32k prefill, then decode graphs
//     planned for the whole reserved context);
// and the static step buffers reject a step beyond the reserved capacity.
// Skips without a GPU. The emulated run (tests/cuda_emu/, label cuda-emu:
// graph capture and replay of cuda/emu/capture.cc) runs the same cases on tiny
// models, with fewer steps and the buckets of a 16-sequence server, the
// partition and bucket cases on Qwen3 only; the 32k contexts only on a GPU.
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
#include "tests/cuda/test_sizes.h"
#include "worker/decode_graphs.h"
#include "worker/kv_cache.h"
#include "worker/model.h"

namespace tpserve {
namespace {

constexpr int32_t kBlockSize = 16;
// Decode steps per batch, and the server whose every bucket is replayed
// (fewer of each in the emulated run, where a step takes a good part of a second).
constexpr int kSteps = cuda_test::kEmulated ? 3 : 8;
constexpr int kEveryBucketSeqs = cuda_test::kEmulated ? 16 : 256;
constexpr int kEveryBucketSteps = cuda_test::kEmulated ? 1 : 2;

// The sizes of one run of decode graphs.
struct GraphRun {
  // Sequences per step, each with the graph bucket it must replay: the
  // smallest captured batch size (worker/decode_graphs.h) that holds it.
  std::vector<std::pair<int, int>> batches;
  int min_prompt, max_prompt;  // random prompt lengths
  int32_t blocks_per_seq;      // >= (max_prompt + steps) / kBlockSize
  int64_t max_position;        // the reserved context (the graphs' fixed decode-attention plan)
  // Graph against the same padded step run eagerly. The eager step plans its
  // decode attention for its own contexts, the graph for max_position
  // (cuda/decode_plan.h); when those plans cut the context differently the
  // fp32 sums run in another order, so bf16 tolerance.
  double padded_tol;
  int steps = kSteps;      // decode steps per batch
  int max_num_seqs = 32;   // the server's, which sets the buckets
};

// Contexts up to 48 keys: every plan is one partition, so the graph and the
// padded eager step run the same arithmetic.
const GraphRun kShortContexts = cuda_test::kEmulated
                                    ? GraphRun{{{1, 1}, {3, 4}}, 1, 24, 3, 256, 1e-3, kSteps, 4}
                                    : GraphRun{{{1, 1}, {3, 4}, {7, 8}, {19, 32}}, 1, 24, 3, 256, 1e-3};
// Contexts 250 .. 274 under a graph planned for 1024 keys: 256-key partitions
// over several blocks, so replays cross from one used block (output written
// directly) to two (partials and the combine) inside one captured grid.
const GraphRun kAcrossPartitions{{{1, 1}, {3, 4}}, 250, 258, 17, 1024, 2e-2, kSteps, cuda_test::kEmulated ? 4 : 32};

// Every bucket of a server with max_num_seqs kEveryBucketSeqs (1, 2, 4, 8,
// then multiples of 16), each replayed full and with one sequence more than
// the bucket below (the most padding it carries).
GraphRun EveryBucket() {
  GraphRun run{{}, 1, 24, 3, 256, 1e-3, kEveryBucketSteps, kEveryBucketSeqs};
  std::vector<int> buckets = {1, 2, 4, 8};
  for (int b = 16; b <= kEveryBucketSeqs; b += 16) buckets.push_back(b);
  for (size_t i = 0; i < buckets.size(); ++i) {
    const int below = i == 0 ? 0 : buckets[i - 1];
    if (below + 1 < buckets[i]) run.batches.push_back({below + 1, buckets[i]});
    run.batches.push_back({buckets[i], buckets[i]});
  }
  return run;
}

// A 32k-token prefill, then decode graphs over contexts of up to 32,768 keys,
// planned for the whole reserved context (2,049 block-table columns).
const GraphRun kLongContexts{{{1, 1}, {2, 2}}, 32700, 32760, 2049, 32784, 2e-2, 4};

struct ModelCase {
  const char* name;
  const char* args;  // tpserve-make-model options
};
#if defined(TPSERVE_CUDA_EMU)
// Head dim 64 and GQA group 2, as below, at a quarter of the width or less.
const ModelCase kModels[] = {
    {"qwen3", "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 2 --kv-heads 1 "
              "--head-dim 64 --vocab 301 --dtype bf16 --tie 0 --seed 41 --max-pos 1024"},
    {"llama", "--arch llama --hidden 128 --intermediate 160 --layers 2 --heads 2 --kv-heads 1 "
              "--vocab 263 --dtype bf16 --tie 1 --seed 42 --rope-scaling llama3 --max-pos 1024"},
};
#else
const ModelCase kModels[] = {
    {"qwen3", "--arch qwen3 --hidden 256 --intermediate 512 --layers 2 --heads 8 --kv-heads 4 "
              "--head-dim 64 --vocab 1001 --dtype bf16 --tie 0 --seed 41 --max-pos 32784"},
    {"llama", "--arch llama --hidden 256 --intermediate 384 --layers 2 --heads 4 --kv-heads 2 "
              "--vocab 517 --dtype bf16 --tie 1 --seed 42 --rope-scaling llama3 --max-pos 32784"},
};
#endif

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

// The three caches of one run, with the same history: the graphs', the
// padded eager step's and the unpadded eager step's.
struct Caches {
  KvCache graph, padded, plain;
};

// Prefills `S` random prompts of run.min_prompt .. run.max_prompt tokens in
// scattered blocks of every cache; returns the greedy first tokens and sets
// tables and lens.
std::vector<int32_t> Prefill(Model& model, Caches& caches, const GraphRun& run, int S, std::mt19937& rng,
                             std::vector<std::vector<int32_t>>& tables, std::vector<int32_t>& lens) {
  const int64_t V = model.config().vocab_size;
  const int32_t blocks_per_seq = run.blocks_per_seq;
  std::vector<int32_t> perm(static_cast<size_t>(int64_t{S} * blocks_per_seq));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  tables.assign(static_cast<size_t>(S), {});
  lens.clear();
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b) tables[static_cast<size_t>(s)].push_back(perm[static_cast<size_t>(s * blocks_per_seq + b)]);
    const int n = run.min_prompt + static_cast<int>(rng() % static_cast<uint32_t>(run.max_prompt - run.min_prompt + 1));
    for (int i = 0; i < n; ++i) prompts[static_cast<size_t>(s)].push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(V)));
    lens.push_back(n);
  }
  const StepBatch prefill = MakeStep(prompts, lens, tables);
  std::vector<int32_t> next;
  for (KvCache* cache : {&caches.graph, &caches.padded, &caches.plain}) {
    absl::StatusOr<std::optional<Logits>> out = model.Forward(prefill.view(), *cache);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    if (next.empty()) {
      for (int s = 0; s < S; ++s) {
        const auto row = (*out)->row(s);
        next.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
      }
    }
  }
  return next;
}

// One decode step of every sequence: the graph against the padded and the
// unpadded eager step; `next` becomes the unpadded step's greedy tokens.
void DecodeStep(Model& model, DecodeGraphs& graphs, Caches& caches, const GraphRun& run, int bucket,
                const std::vector<std::vector<int32_t>>& tables, std::vector<int32_t>& lens,
                std::vector<int32_t>& next, int32_t max_blocks_per_seq) {
  const int S = static_cast<int>(lens.size());
  const int64_t V = model.config().vocab_size;
  std::vector<std::vector<int32_t>> tokens;
  for (int s = 0; s < S; ++s) {
    tokens.push_back({next[static_cast<size_t>(s)]});
    ++lens[static_cast<size_t>(s)];
  }
  const StepBatch decode = MakeStep(tokens, lens, tables);
  StepBatch padded;
  ASSERT_TRUE(padded.AssignPaddedDecode(decode.view(), bucket, max_blocks_per_seq, kBlockSize).ok());

  absl::StatusOr<std::optional<Logits>> g = graphs.Forward(decode.view());
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::optional<Logits>> p = model.Forward(padded.view(), caches.padded);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::optional<Logits>> e = model.Forward(decode.view(), caches.plain);
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

// Captures the decode graphs once, as the server does, then for each batch
// size prefills fresh sequences and replays run.steps steps of growing
// contexts against the padded and unpadded eager steps.
void RunDecodeGraphs(const ModelCase& model_case, const GraphRun& run) {
  const uint32_t seed = cuda_test::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " (TPSERVE_TEST_SEED replays it)");
  std::mt19937 rng(seed);
  const std::filesystem::path dir = MakeTestModel(model_case);
  std::unique_ptr<Backend> gpu = MakeCudaBackend(0);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
  int max_batch = 1;
  for (const auto& [S, bucket] : run.batches) max_batch = std::max(max_batch, S);
  ModelOptions options;
  // The prefill of every sequence in one step.
  options.max_num_tokens = std::max<int64_t>(512, int64_t{max_batch} * run.max_prompt);
  options.max_num_seqs = run.max_num_seqs;
  options.max_position = run.max_position;
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::Load(dir, *gpu, *solo, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Model& model = **loaded;
  ASSERT_TRUE(DecodeGraphs::Supported(*gpu, *solo, model));
  const StepCapacity capacity = StepCapacityFor(model, kBlockSize);
  ASSERT_TRUE(gpu->Reserve(capacity).ok());

  const int64_t num_blocks = int64_t{max_batch} * run.blocks_per_seq;
  absl::StatusOr<KvCache> graph_cache = KvCache::Allocate(*gpu, model.kv_cache_shape(num_blocks, kBlockSize));
  absl::StatusOr<KvCache> padded_cache = KvCache::Allocate(*gpu, model.kv_cache_shape(num_blocks, kBlockSize));
  absl::StatusOr<KvCache> plain_cache = KvCache::Allocate(*gpu, model.kv_cache_shape(num_blocks, kBlockSize));
  ASSERT_TRUE(graph_cache.ok() && padded_cache.ok() && plain_cache.ok());
  Caches caches{*std::move(graph_cache), *std::move(padded_cache), *std::move(plain_cache)};
  DecodeGraphs graphs(model, caches.graph, *gpu, capacity);
  const absl::Status captured = graphs.Capture();
  ASSERT_TRUE(captured.ok()) << captured;
  ASSERT_TRUE(graphs.captured());

  for (const auto& [S, expected_bucket] : run.batches) {
    SCOPED_TRACE(testing::Message() << "batch " << S);
    const int32_t bucket = DecodeGraphBucket(graphs.batch_sizes(), S);
    ASSERT_EQ(bucket, expected_bucket);
    std::vector<std::vector<int32_t>> tables;
    std::vector<int32_t> lens;
    std::vector<int32_t> next = Prefill(model, caches, run, S, rng, tables, lens);
    ASSERT_EQ(next.size(), static_cast<size_t>(S));
    for (int step = 0; step < run.steps; ++step) {
      SCOPED_TRACE(testing::Message() << "decode step " << step);
      DecodeStep(model, graphs, caches, run, bucket, tables, lens, next, capacity.max_blocks_per_seq());
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_EQ(graphs.replays(), int64_t{run.steps} * std::ssize(run.batches));
  std::filesystem::remove_all(dir);
}

class CudaGraphTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  // The emulated run keeps its time for the first model in the longer cases:
  // what they exercise (partitions, buckets) is the same in both families.
  void SkipSecondModelWhenEmulated() {
    if (cuda_test::kEmulated && std::string(GetParam().name) != kModels[0].name) {
      GTEST_SKIP() << "emulated: this case runs on " << kModels[0].name << " only (both on a GPU)";
    }
  }
};

TEST_P(CudaGraphTest, ReplayedDecodeStepsMatchEagerSteps) {
  TPSERVE_REQUIRE_GPU();
  RunDecodeGraphs(GetParam(), kShortContexts);
}

// The fast decode attention inside a graph: one grid, fixed at capture for
// the reserved context, serves replays whose contexts cross a partition.
TEST_P(CudaGraphTest, ReplayedDecodeStepsAcrossAttentionPartitions) {
  TPSERVE_REQUIRE_GPU();
  SkipSecondModelWhenEmulated();
  RunDecodeGraphs(GetParam(), kAcrossPartitions);
}

// Every captured bucket of a 256-sequence server (16 emulated) replays, full and padded.
TEST_P(CudaGraphTest, ReplayedDecodeStepsAtEveryBucket) {
  TPSERVE_REQUIRE_GPU();
  SkipSecondModelWhenEmulated();
  RunDecodeGraphs(GetParam(), EveryBucket());
}

// Decode graphs over 32k-key contexts, after a 32k-token prefill.
TEST_P(CudaGraphTest, ReplayedDecodeStepsAtContextsUpTo32k) {
  TPSERVE_REQUIRE_GPU();
  if (cuda_test::kEmulated) GTEST_SKIP() << "a 32k-token prefill is GPU-only (minutes on the emulator)";
  RunDecodeGraphs(GetParam(), kLongContexts);
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
