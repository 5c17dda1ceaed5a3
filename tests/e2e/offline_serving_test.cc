// End to end: the offline engine (tpserve-generate) and the service
// (coordinator + workers) run the same scheduler and step runner, so they give
// the same greedy tokens, on tp 1 and 2, with the prefix cache on and hit:
// the prompts share a 21-token prefix (two full blocks of 8) and one prompt
// comes twice.
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

constexpr int kBlockSize = 8;
constexpr int kMaxTokens = 7;

std::vector<std::vector<int32_t>> SharedPrefixPrompts() {
  std::mt19937 rng(23);
  std::vector<int32_t> prefix(21);
  for (int32_t& t : prefix) t = static_cast<int32_t>(rng() % 400);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {3, 6, 1, 9}) {
    prompts.push_back(prefix);
    for (int i = 0; i < n; ++i) prompts.back().push_back(static_cast<int32_t>(rng() % 400));
  }
  prompts.push_back(prompts[1]);  // the same prompt again: cached up to its last full block
  return prompts;
}

class OfflineServingTest : public ::testing::TestWithParam<int> {
 protected:
  TempDir dir_;
};

TEST_P(OfflineServingTest, SameGreedyTokensWithThePrefixCacheOn) {
  const int tp = GetParam();
  const std::string model = MakeModel(dir_.path(), "llama", {"--seed", "19"});
  const std::vector<std::vector<int32_t>> prompts = SharedPrefixPrompts();
  const std::string block = std::to_string(kBlockSize);

  // Offline, one sequence at a time so each later prompt finds the earlier
  // ones' blocks; and with the cache off, every token computed.
  const OfflineOutcome cached = OfflineGenerate(model, tp, prompts, kMaxTokens, dir_.path(),
                                                {"--block-size", block, "--max-num-seqs", "1",
                                                 "--enable-prefix-caching=true"});
  const OfflineOutcome plain = OfflineGenerate(model, tp, prompts, kMaxTokens, dir_.path(),
                                               {"--block-size", block, "--enable-prefix-caching=false"});
  ASSERT_EQ(cached.tokens.size(), prompts.size());
  ASSERT_EQ(plain.tokens.size(), prompts.size());
  EXPECT_EQ(cached.tokens, plain.tokens) << "the offline prefix cache changed the tokens";
  int64_t all_tokens = 0;
  for (const auto& p : prompts) all_tokens += static_cast<int64_t>(p.size()) + kMaxTokens - 1;
  EXPECT_EQ(plain.computed_tokens, all_tokens);
  EXPECT_LT(cached.computed_tokens, all_tokens) << "the offline engine never hit its prefix cache";

  // The service, one request at a time: every request after the first hits.
  Coordinator c = StartCoordinator(model, tp, dir_.path() + "/coordinator.log",
                                   {"--block-size", block, "--enable-prefix-caching=true"});
  ASSERT_TRUE(c.stub) << "no coordinator";
  for (size_t i = 0; i < prompts.size(); ++i) {
    v1::GenerateRequest r = Greedy(kMaxTokens);
    for (int32_t t : prompts[i]) r.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(t));
    const GenerateOutcome o = Generate(*c.stub, r);
    ASSERT_TRUE(o.status.ok()) << "prompt " << i << ": " << o.status.error_message();
    ASSERT_TRUE(o.completed) << "prompt " << i;
    EXPECT_EQ(o.tokens, cached.tokens[i]) << "prompt " << i << ", tp " << tp;
    const uint32_t hit = o.complete.usage().cached_tokens();
    if (i == 0) {
      EXPECT_EQ(hit, 0u);
    } else {
      EXPECT_GE(hit, 2u * kBlockSize) << "prompt " << i << " missed the shared prefix";
      EXPECT_EQ(hit % kBlockSize, 0u);
    }
  }
  EXPECT_GT(ServerInfo(*c.stub).prefix_cache_hit_rate(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, OfflineServingTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat("tp", info.param); });

}  // namespace
}  // namespace tpserve::e2e
