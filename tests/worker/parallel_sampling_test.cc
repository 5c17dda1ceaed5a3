// Parallel sampling (n > 1) on shared KV blocks, on the CPU backend, through
// the serving scheduler and the step runner (scheduler/scheduler.h):
//   * greedy choices are identical to each other and to a request of one
//     choice, for prompts that end mid-block and on a block boundary, and
//     through preemptions under a small pool; the prompt is computed once
//     (plus each other choice's last prompt token);
//   * seeded choices give the tokens of separate requests seeded seed + i;
//   * copy-on-write keeps each choice's K/V its own: at its end, every
//     position of every choice holds exactly (bit for bit: the CPU backend is
//     batch invariant, docs/architecture.md) what a run of that choice's
//     tokens alone writes, so no choice ever saw another's tokens; and every
//     block comes back once.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu_backend.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_plan.h"
#include "tests/testing/seed.h"
#include "tests/worker/worker_test_util.h"
#include "worker/engine.h"
#include "worker/step_runner.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

constexpr int32_t kVocab = 301;

class ParallelSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 301 --dtype f32 --tie 0 --seed 29");
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    backend_ = MakeCpuBackend();
    comm_ = MakeSoloCommunicator();
  }

  static std::vector<int32_t> Prompt(int n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % kVocab);
    return p;
  }

  // Results of `reqs` from a fresh engine (one result per choice); its stats in *stats.
  std::vector<GenerationResult> Run(const std::vector<GenerationRequest>& reqs, EngineOptions options = {},
                                    GenerationStats* stats = nullptr) {
    options.model.max_num_tokens = 64;
    options.model.max_num_seqs = 8;
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(dir_->path() / "m", *backend_, *comm_, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return {};
    absl::StatusOr<std::vector<GenerationResult>> out = (*engine)->Generate(reqs);
    EXPECT_TRUE(out.ok()) << out.status();
    if (stats != nullptr) *stats = (*engine)->last_stats();
    return out.ok() ? *std::move(out) : std::vector<GenerationResult>{};
  }

  static GenerationRequest Request(std::vector<int32_t> prompt, int32_t n, SamplingParams sampling, int64_t max_tokens) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.n = n;
    r.sampling = sampling;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }

  static TempDir* dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
};
TempDir* ParallelSamplingTest::dir_ = nullptr;

TEST_F(ParallelSamplingTest, GreedyChoicesEqualEachOtherAndOneChoiceWithOnePrefill) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed));
  for (int prompt_len : {1, 13, 16, 33}) {  // block_size 16: mid-block, one token, on the boundary
    SCOPED_TRACE("prompt of " + std::to_string(prompt_len));
    const std::vector<int32_t> prompt = Prompt(prompt_len, seed + static_cast<uint64_t>(prompt_len));
    GenerationStats stats;
    const auto choices = Run({Request(prompt, 4, SamplingParams{.temperature = 0.0f}, 9)}, {}, &stats);
    const auto one = Run({Request(prompt, 1, SamplingParams{.temperature = 0.0f}, 9)});
    ASSERT_EQ(choices.size(), 4u);
    ASSERT_EQ(one.size(), 1u);
    for (const GenerationResult& c : choices) EXPECT_EQ(c.tokens, one[0].tokens);
    // One prefill; each other choice computes its last prompt token only.
    EXPECT_EQ(stats.prompt_tokens_computed, prompt_len + 3);
  }
}

TEST_F(ParallelSamplingTest, GreedyChoicesSurvivePreemptionUnderASmallPool) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed));
  const std::vector<int32_t> prompt = Prompt(13, seed);
  EngineOptions small;
  small.block_size = 4;
  small.num_blocks = 14;  // 4 choices of 13 + 20 tokens need 27 blocks even sharing the prompt's 3 full ones
  GenerationStats stats;
  const auto choices = Run({Request(prompt, 4, SamplingParams{.temperature = 0.0f}, 20)}, small, &stats);
  EXPECT_GT(stats.preemptions, 0);
  const auto one = Run({Request(prompt, 1, SamplingParams{.temperature = 0.0f}, 20)});
  ASSERT_EQ(choices.size(), 4u);
  ASSERT_EQ(one.size(), 1u);
  for (const GenerationResult& c : choices) EXPECT_EQ(c.tokens, one[0].tokens);
}

TEST_F(ParallelSamplingTest, SeededChoicesEqualSeparateRequestsSeededSeedPlusIndex) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed));
  const std::vector<int32_t> prompt = Prompt(21, seed);
  const SamplingParams sampling{.temperature = 1.0f, .seed = seed};
  const auto choices = Run({Request(prompt, 3, sampling, 12)});
  std::vector<GenerationRequest> separate;
  for (int32_t i = 0; i < 3; ++i) separate.push_back(Request(prompt, 1, ChoiceSampling(sampling, i), 12));
  const auto alone = Run(separate);
  ASSERT_EQ(choices.size(), 3u);
  ASSERT_EQ(alone.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(choices[i].tokens, alone[i].tokens) << "choice " << i;
  // Temperature 1 over 301 tokens: three identical choices would mean one generator for all.
  EXPECT_FALSE(choices[0].tokens == choices[1].tokens && choices[1].tokens == choices[2].tokens);
}

// Every layer's K and V of positions [0, len) of a sequence, through its block table.
std::vector<float> KvOf(const KvCache& cache, std::span<const BlockId> table, int64_t len) {
  std::vector<float> out;
  const int64_t bs = cache.block_size(), width = cache.shape().num_kv_heads * cache.shape().head_dim;
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    for (const Tensor& t : {cache.layer(l).k, cache.layer(l).v}) {
      for (int64_t p = 0; p < len; ++p) {
        const float* row = t.ptr<float>() + (table[static_cast<size_t>(p / bs)] * bs + p % bs) * width;
        out.insert(out.end(), row, row + width);
      }
    }
  }
  return out;
}

TEST_F(ParallelSamplingTest, CopyOnWriteKeepsEachChoicesKvItsOwn) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed));
  ModelOptions options;
  options.max_num_tokens = 64;
  options.max_num_seqs = 8;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir_->path() / "m", *backend_, *comm_, options);
  ASSERT_TRUE(model.ok()) << model.status();
  constexpr int32_t kBlockSize = 4;
  constexpr int64_t kNumBlocks = 40;
  constexpr int64_t kMaxTokens = 7;
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend_, (*model)->kv_cache_shape(kNumBlocks, kBlockSize));
  ASSERT_TRUE(cache.ok()) << cache.status();
  StepRunner runner(**model, *cache, 0);
  BlockManager blocks(kNumBlocks, kBlockSize);
  Scheduler sched(blocks, {.max_num_batched_tokens = 64});
  const std::vector<int32_t> prompt = Prompt(10, seed);  // two full blocks and a partial one
  const std::vector<uint64_t> forks = {1, 2};
  ASSERT_TRUE(sched.Add(0, prompt, 0, forks).ok());
  std::map<uint64_t, SamplingParams> sampling;
  for (uint64_t id : {0, 1, 2}) sampling[id] = ChoiceSampling({.temperature = 1.0f, .seed = seed}, static_cast<int32_t>(id));

  std::map<uint64_t, std::vector<int32_t>> tokens;  // each choice's prompt + output, minus the last sampled
  std::map<uint64_t, std::vector<float>> kv;       // their K/V in the shared cache, at the end
  int64_t copies = 0;
  for (int guard = 0; guard < 100 && !sched.idle(); ++guard) {
    const ScheduledStep step = sched.Schedule();
    const StepPlan plan = BuildStepPlan(step, [&](uint64_t id) -> const SamplingParams& { return sampling.at(id); });
    copies += std::ssize(plan.block_copies);
    absl::StatusOr<std::vector<StepToken>> got = runner.Run(plan);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<std::pair<uint64_t, int32_t>> sampled;
    for (const StepToken& t : *got) sampled.emplace_back(t.seq_id, t.sampled.token);
    sched.OnStepDone(step, sampled);
    for (const auto& [id, token] : sampled) {
      const Sequence& seq = *sched.Find(id);
      if (seq.num_output_tokens() < kMaxTokens) continue;
      const int64_t len = std::ssize(seq.tokens) - 1;  // the last token was sampled, never computed
      tokens[id].assign(seq.tokens.begin(), seq.tokens.begin() + len);
      kv[id] = KvOf(*cache, seq.block_table, len);
      sched.Finish(id);
    }
  }
  ASSERT_EQ(kv.size(), 3u);
  EXPECT_EQ(copies, 2);  // the partial prompt block: three holders, the last writes in place
  EXPECT_EQ(blocks.num_free_blocks(), kNumBlocks);
  EXPECT_FALSE(tokens[0] == tokens[1] && tokens[1] == tokens[2]) << "the choices should differ";

  // Each choice's tokens alone, in a cache of their own.
  for (uint64_t id : {0, 1, 2}) {
    absl::StatusOr<KvCache> own = KvCache::Allocate(*backend_, (*model)->kv_cache_shape(kNumBlocks, kBlockSize));
    ASSERT_TRUE(own.ok()) << own.status();
    StepRunner alone(**model, *own, 0);
    const int64_t len = std::ssize(tokens[id]);
    std::vector<int32_t> table;
    for (int32_t b = 0; b < BlockManager::BlocksFor(len, kBlockSize); ++b) table.push_back(b);
    StepPlan plan;
    plan.new_sequences.push_back(NewSequencePlan{.seq_id = 9, .prompt = tokens[id], .token_ids = tokens[id],
                                                 .block_ids = table, .sampling = {}, .sample = false});
    plan.order = {9};
    ASSERT_TRUE(alone.Run(plan).ok());
    EXPECT_EQ(kv[id], KvOf(*own, table, len)) << "choice " << id << "'s K/V differ from its tokens' alone";
  }
}

}  // namespace
}  // namespace tpserve
