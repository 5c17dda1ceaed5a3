// StepRunner with draft_token_ids (speculative decoding, worker/step_runner.h):
// a sequence that verifies proposals (some right, some wrong) gets the tokens
// and log-probs of the same sequence decoded one token per step, bit for bit
// (the CPU backend: every verification row has the bits of the one-token
// step), greedy and seeded sampling alike; after each step the runner keeps
// only the accepted positions and their blocks, so the next step, planned on
// exactly that, goes on right. Drafts without decode_sampled are refused.
#include <algorithm>
#include <cstring>
#include <random>

#include "backend/cpu_backend.h"
#include "gtest/gtest.h"
#include "scheduler/block_manager.h"
#include "tests/testing/seed.h"
#include "tests/worker/worker_test_util.h"
#include "worker/step_runner.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

constexpr int32_t kVocab = 301;
constexpr int32_t kBlockSize = 4;
constexpr int64_t kNumBlocks = 97;

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t proposed = 0, accepted = 0;
};

class SpeculativeStepRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 301 --dtype f32 --tie 0 --seed 23");
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    backend_ = MakeCpuBackend();
    comm_ = MakeSoloCommunicator();
    ModelOptions options;
    options.max_num_tokens = 64;
    options.max_num_seqs = 8;
    options.max_num_logits_rows = 8 + 16;
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir_->path() / "m", *backend_, *comm_, options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend_, model_->kv_cache_shape(kNumBlocks, kBlockSize));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::make_unique<KvCache>(*std::move(cache));
    runner_ = std::make_unique<StepRunner>(*model_, *cache_, /*rank=*/0);
    for (int32_t b = 0; b < kNumBlocks; ++b) free_.push_back(b);
  }

  // Blocks so that `table` holds `tokens` positions; the ids added.
  std::vector<int32_t> Grow(std::vector<int32_t>& table, int64_t tokens) {
    std::vector<int32_t> added;
    while (std::ssize(table) < BlockManager::BlocksFor(tokens, kBlockSize) && !free_.empty()) {
      added.push_back(free_.back());
      table.push_back(free_.back());
      free_.pop_back();
    }
    return added;
  }

  // Generates `n` tokens for sequence `id`; with `oracle`, each step after the
  // first proposes up to 4 of its next tokens, a proposal wrong with
  // probability 0.3, and checks what the step returns against it.
  Generated Generate(uint64_t id, const std::vector<int32_t>& prompt, const SamplingParams& sampling, int64_t n,
                     const std::vector<int32_t>* oracle, std::mt19937_64& rng) {
    Generated g;
    std::vector<int32_t> table;
    StepPlan first;
    first.finished.swap(done_);  // the sequences generated before: their blocks are free again
    const std::vector<int32_t> blocks = Grow(table, std::ssize(prompt));
    first.new_sequences.push_back(NewSequencePlan{.seq_id = id, .prompt = prompt, .token_ids = prompt,
                                                  .block_ids = blocks, .sampling = sampling, .sample = true});
    first.order = {id};
    absl::StatusOr<std::vector<StepToken>> got = runner_->Run(first);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return g;
    auto keep = [&](const StepToken& t) {
      g.tokens.push_back(t.sampled.token);
      g.logprobs.push_back(t.sampled.logprob);
    };
    keep((*got)[0]);
    int64_t computed = std::ssize(prompt);  // the last sampled token is not computed yet
    for (int64_t step = 0; std::ssize(g.tokens) < n; ++step) {
      ContinuingSequencePlan c{.seq_id = id, .sample = true, .decode_sampled = true};
      if (oracle != nullptr) {
        const int64_t room = std::min<int64_t>(1 + static_cast<int64_t>(rng() % 4), n - std::ssize(g.tokens) - 1);
        for (int64_t i = 0; i < room; ++i) {
          int32_t t = (*oracle)[static_cast<size_t>(std::ssize(g.tokens) + i)];
          // Wrong with probability 0.3, and the last of every third step's for sure.
          if (std::bernoulli_distribution(0.3)(rng) || (step % 3 == 2 && i + 1 == room)) t = (t + 1) % kVocab;
          c.draft_token_ids.push_back(t);
        }
      }
      c.new_block_ids = Grow(table, computed + 1 + std::ssize(c.draft_token_ids));
      StepPlan plan;
      plan.continuing.push_back(c);
      plan.order = {id};
      got = runner_->Run(plan);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) return g;
      const size_t k = c.draft_token_ids.size();
      EXPECT_GE(got->size(), 1u);
      EXPECT_LE(got->size(), k + 1);
      // Kept: the proposals equal to the token sampled before them, then one more.
      for (size_t i = 0; i + 1 < got->size(); ++i) EXPECT_EQ((*got)[i].sampled.token, c.draft_token_ids[i]);
      if (got->size() <= k) {
        EXPECT_NE(got->back().sampled.token, c.draft_token_ids[got->size() - 1]);
      }
      g.proposed += static_cast<int64_t>(k);
      g.accepted += std::ssize(*got) - 1;
      for (const StepToken& t : *got) keep(t);
      computed += std::ssize(*got);
      // As Scheduler::OnStepDone: the blocks past the accepted positions go back.
      while (std::ssize(table) > BlockManager::BlocksFor(computed, kBlockSize)) {
        free_.push_back(table.back());
        table.pop_back();
      }
    }
    done_.push_back(id);
    free_.insert(free_.end(), table.begin(), table.end());
    return g;
  }

  static TempDir* dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<StepRunner> runner_;
  std::vector<int32_t> free_;
  std::vector<uint64_t> done_;  // generated, to be dropped by the next plan
};

TempDir* SpeculativeStepRunnerTest::dir_ = nullptr;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(SpeculativeStepRunnerTest, VerifiedDraftsGiveTheOneTokenStepsOutput) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 6; ++round) {
    std::vector<int32_t> prompt(static_cast<size_t>(3 + rng() % 9));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % kVocab);
    SamplingParams sampling;
    sampling.logprobs = 0;
    sampling.temperature = 0;  // greedy
    if (round % 2 == 1) {  // seeded sampling: the same draws, so the same tokens
      sampling.temperature = 0.9f;
      sampling.top_p = 0.95f;
      sampling.seed = rng();
    }
    const uint64_t id = 10 + 2 * static_cast<uint64_t>(round);
    const Generated plain = Generate(id, prompt, sampling, 24, nullptr, rng);
    const Generated spec = Generate(id + 1, prompt, sampling, 24, &plain.tokens, rng);
    EXPECT_EQ(spec.tokens, plain.tokens) << "round " << round << ", seed " << seed;
    EXPECT_TRUE(SameBits(spec.logprobs, plain.logprobs)) << "round " << round << ", seed " << seed;
    EXPECT_GT(spec.accepted, 0) << "round " << round;
    if (round % 2 == 0) {  // greedy: a wrong proposal is never kept (sampled, it may be drawn)
      EXPECT_LT(spec.accepted, spec.proposed) << "round " << round;
    }
  }
}

TEST_F(SpeculativeStepRunnerTest, DraftsWithoutDecodeSampledAreRefused) {
  std::vector<int32_t> table;
  StepPlan first;
  first.new_sequences.push_back(NewSequencePlan{.seq_id = 1, .prompt = {5, 6, 7}, .token_ids = {5, 6, 7},
                                                .block_ids = Grow(table, 3), .sample = true});
  first.order = {1};
  absl::StatusOr<std::vector<StepToken>> got = runner_->Run(first);
  ASSERT_TRUE(got.ok()) << got.status();
  StepPlan bad;
  bad.continuing.push_back(ContinuingSequencePlan{.seq_id = 1, .new_block_ids = Grow(table, 6),
                                                  .token_ids = {(*got)[0].sampled.token}, .sample = true,
                                                  .draft_token_ids = {8, 9}});
  bad.order = {1};
  const absl::StatusOr<std::vector<StepToken>> refused = runner_->Run(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("draft_token_ids"), std::string::npos) << refused.status();
  // Nothing changed: the same step with decode_sampled runs.
  bad.continuing[0].token_ids.clear();
  bad.continuing[0].decode_sampled = true;
  EXPECT_TRUE(runner_->Run(bad).ok());
}

}  // namespace
}  // namespace tpserve
