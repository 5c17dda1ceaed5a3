// Speculative greedy generation (worker/speculative_greedy.h, issue 27) gives
// the output of plain greedy generation, token for token, on the CPU backend:
// with the n-gram and suffix proposers over many random prompts (repeating
// parts, so that proposals are accepted and rejected), with a replay proposer
// that is always right (k + 1 tokens a step) or always wrong (one), and with
// the KV cache reused from run to run (rejected tokens' K/V left in slots that
// are never read before they are written anew).
#include "worker/speculative_greedy.h"

#include <random>

#include "backend/cpu_backend.h"
#include "comm/communicator.h"
#include "gtest/gtest.h"
#include "speculative/replay_proposer.h"
#include "tests/testing/seed.h"
#include "tests/worker/worker_test_util.h"

namespace tpserve {
namespace {

using speculative::MakeProposer;

class SpeculativeGreedyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing_util::TempDir();
    testing_util::MakeModel(dir_->path() / "qwen3",
                            "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 263 --dtype f32 --tie 0 --seed 21");
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Load(dir_->path() / "qwen3", *backend_, *comm_,
                    {.max_num_tokens = 64, .max_num_seqs = 1, .max_position = 128, .max_num_logits_rows = 16});
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *std::move(m);
    absl::StatusOr<KvCache> c = KvCache::Allocate(*backend_, model_->kv_cache_shape(32, 4));
    ASSERT_TRUE(c.ok()) << c.status();
    cache_.emplace(*std::move(c));
    for (int32_t b = 0; b < 32; ++b) table_.push_back((b * 7) % 32);  // scattered
  }

  GreedyResult Generate(const std::vector<int32_t>& prompt, int32_t max_tokens, int32_t k,
                        speculative::Proposer* proposer) {
    absl::StatusOr<GreedyResult> r = GenerateGreedy(*model_, *cache_, prompt, table_,
                                                    {.max_tokens = max_tokens, .num_speculative_tokens = k}, proposer);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : GreedyResult{};
  }

  static testing_util::TempDir* dir_;
  std::unique_ptr<Backend> backend_ = MakeCpuBackend();
  std::unique_ptr<Communicator> comm_ = MakeSoloCommunicator();
  std::unique_ptr<Model> model_;
  std::optional<KvCache> cache_;
  std::vector<int32_t> table_;
};
testing_util::TempDir* SpeculativeGreedyTest::dir_ = nullptr;

// Random tokens with a random earlier stretch repeated now and then.
std::vector<int32_t> RepetitivePrompt(std::mt19937_64& rng, int n) {
  std::vector<int32_t> p;
  while (static_cast<int>(p.size()) < n) {
    if (p.size() > 4 && rng() % 3 == 0) {
      const size_t from = rng() % (p.size() - 2), len = 2 + rng() % 5;
      for (size_t i = 0; i < len && from + i < p.size(); ++i) p.push_back(p[from + i]);
    } else {
      p.push_back(static_cast<int32_t>(rng() % 61));
    }
  }
  p.resize(static_cast<size_t>(n));
  return p;
}

TEST_F(SpeculativeGreedyTest, NgramAndSuffixProposalsLeaveTheOutputAsIs) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  int64_t proposed = 0, accepted = 0;
  for (int i = 0; i < 120; ++i) {
    const std::vector<int32_t> prompt = RepetitivePrompt(rng, 4 + static_cast<int>(rng() % 40));
    const int32_t max_tokens = 1 + static_cast<int32_t>(rng() % 40), k = 1 + static_cast<int32_t>(rng() % 6);
    SCOPED_TRACE(testing::Message() << "prompt " << i << " of " << prompt.size() << " tokens, k " << k);
    const GreedyResult plain = Generate(prompt, max_tokens, k, nullptr);
    ASSERT_EQ(plain.tokens.size(), static_cast<size_t>(max_tokens));
    EXPECT_EQ(plain.steps, max_tokens - 1);
    std::unique_ptr<speculative::Proposer> proposer =
        i % 2 == 0 ? MakeProposer(*speculative::NgramProposer::Create(
                         {.prompt_lookup_min = 1 + i % 3, .prompt_lookup_max = 3, .num_speculative_tokens = k}))
                   : MakeProposer(*speculative::SuffixProposer::Create(
                         {.max_depth = 12, .num_speculative_tokens = k, .max_spec_factor = 2, .min_token_prob = 0.2},
                         nullptr));
    const GreedyResult spec = Generate(prompt, max_tokens, k, proposer.get());
    ASSERT_EQ(spec.tokens, plain.tokens);
    EXPECT_LE(spec.accepted, spec.proposed);
    EXPECT_GE(spec.steps + spec.accepted, max_tokens - 1);  // each step yields its accepted tokens + 1
    proposed += spec.proposed;
    accepted += spec.accepted;
  }
  // The run exercised both outcomes.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, proposed);
}

TEST_F(SpeculativeGreedyTest, AlwaysRightTakesKPlusOneTokensAStepAlwaysWrongOne) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> prompt = RepetitivePrompt(rng, 17);
  const int32_t max_tokens = 33, k = 4;
  const GreedyResult plain = Generate(prompt, max_tokens, k, nullptr);
  std::vector<int32_t> known = prompt;
  known.insert(known.end(), plain.tokens.begin(), plain.tokens.end());
  speculative::ReplayProposer right(known, k, /*p=*/0, 263, seed), wrong(known, k, /*p=*/1, 263, seed);
  const GreedyResult r = Generate(prompt, max_tokens, k, &right);
  EXPECT_EQ(r.tokens, plain.tokens);
  EXPECT_EQ(r.steps, (max_tokens - 1 + k) / (k + 1));  // 32 tokens after the first, 5 a step
  // 6 steps of 4 accepted; the 7th proposes the 2 known tokens left (both accepted, 1 of them kept).
  EXPECT_EQ(r.accepted_at, (std::vector<int64_t>{7, 7, 6, 6}));
  const GreedyResult w = Generate(prompt, max_tokens, k, &wrong);
  EXPECT_EQ(w.tokens, plain.tokens);
  EXPECT_EQ(w.steps, max_tokens - 1);
  EXPECT_EQ(w.accepted, 0);
}

// With a SpeculationPolicy over README's batch-1 costs: proposals that are
// never right are soon not asked for (a probe now and then), ones that are
// always right are asked for in full; the output stays plain greedy's.
TEST_F(SpeculativeGreedyTest, ThePolicyTurnsProposalsOffWhenNothingIsAccepted) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> prompt = RepetitivePrompt(rng, 11);
  const int32_t max_tokens = 61, k = 4;
  const std::vector<double> cost{1, 1.04, 1.19, 1.26, 1.30};
  const GreedyResult plain = Generate(prompt, max_tokens, k, nullptr);
  std::vector<int32_t> known = prompt;
  known.insert(known.end(), plain.tokens.begin(), plain.tokens.end());
  auto generate = [&](speculative::Proposer& proposer) {
    absl::StatusOr<GreedyResult> r = GenerateGreedy(
        *model_, *cache_, prompt, table_,
        {.max_tokens = max_tokens, .num_speculative_tokens = k, .policy_cost = cost, .policy = {.probe_every = 16}},
        &proposer);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : GreedyResult{};
  };
  speculative::ReplayProposer wrong(known, k, /*p=*/1, 263, seed);
  const GreedyResult w = generate(wrong);
  EXPECT_EQ(w.tokens, plain.tokens);
  EXPECT_EQ(w.steps, max_tokens - 1);
  // A few steps to learn (4, then 1s while the estimate falls), then one
  // 1-token probe every 16 steps: far below the 4 x 60 of no policy.
  EXPECT_LE(w.proposed, 16) << w.proposed;
  speculative::ReplayProposer right(known, k, /*p=*/0, 263, seed);
  const GreedyResult r = generate(right);
  EXPECT_EQ(r.tokens, plain.tokens);
  EXPECT_EQ(r.accepted, r.proposed);
  EXPECT_EQ(r.steps, (max_tokens - 1 + k) / (k + 1));
}

TEST(AcceptGreedyTest, KeepsTheLongestPrefixEqualToTheTarget) {
  using speculative::AcceptGreedy;
  EXPECT_EQ(AcceptGreedy(std::vector<int32_t>{5, 6, 7}, std::vector<int32_t>{5, 6, 7, 8}), 3);
  EXPECT_EQ(AcceptGreedy(std::vector<int32_t>{5, 6, 7}, std::vector<int32_t>{5, 9, 7, 8}), 1);
  EXPECT_EQ(AcceptGreedy(std::vector<int32_t>{5}, std::vector<int32_t>{4, 5}), 0);
  EXPECT_EQ(AcceptGreedy(std::vector<int32_t>{}, std::vector<int32_t>{4}), 0);
}

}  // namespace
}  // namespace tpserve
