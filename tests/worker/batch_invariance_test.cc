// Batch invariance of the CPU backend, end to end through the offline engine
// (the serving scheduler and step runner): one request run alone gives
// exactly the same token ids, log-probs and logits — every bit — when it
//   * shares its steps with 1 to 64 other requests of other lengths, in
//     random makeups and positions;
//   * is prefilled in chunks of 1 token up to the whole prompt;
//   * finds its prompt's prefix in the prefix cache, or not;
//   * is preempted and recomputed, with and without the prefix cache;
// at tp 1 (two GEMM threads) and tp 2 (two ranks as threads over gloo). The
// request samples (temperature, top-p, its own seed), so a logit that moved by
// one bit could also change a token. What makes it hold: docs/architecture.md,
// "The CPU backend's numerics". The overlapped and lock-step servers are held
// to the same in tests/e2e/overlap_test.cc.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/rank_engines.h"
#include "tests/testing/seed.h"
#include "tests/worker/worker_test_util.h"
#include "worker/engine.h"

namespace tpserve {
namespace {

using testing_util::BitDifference;
using testing_util::RankEngines;
using testing_util::RankParts;
using testing_util::TempDir;

constexpr int32_t kVocab = 397;

using Group = testing_util::CpuRankGroup;

class BatchInvarianceTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // Qwen3 (q/k norm), GQA 2: the GEMMs have K tails and several K blocks
    // (down_proj: K = 600, 300 a rank at tp 2), N that is no multiple of a
    // panel (vocab 397), rows that go to the GEMM threads and rows that do not.
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch qwen3 --hidden 80 --intermediate 600 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 397 --dtype f32 --tie 0 --seed 41");
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    group_ = Group::Make(GetParam(), dir_->path() / absl::StrCat("store-", store_count_++));
    ASSERT_NE(group_, nullptr);
    seed_ = testing_util::TestSeed();
    rng_.seed(seed_);
    // The request under test: a 37-token prompt, sampled with its own seed,
    // with log-probs and its logits rows.
    target_.prompt = RandomTokens(37);
    target_.max_tokens = 9;
    target_.ignore_eos = true;
    target_.sampling.temperature = 0.9f;
    target_.sampling.top_p = 0.95f;
    target_.sampling.seed = 1234;
    target_.sampling.logprobs = 3;
    EngineOptions options = Options();
    alone_ = group_->GenerateOnce(model(), options, {target_});
    ASSERT_EQ(alone_.size(), 1u);
    ASSERT_EQ(std::ssize(alone_[0].tokens), target_.max_tokens);
    ASSERT_EQ(alone_[0].logits.size(), alone_[0].tokens.size());
  }

  static std::filesystem::path model() { return dir_->path() / "m"; }
  static EngineOptions Options() {
    EngineOptions o;
    o.return_logits = true;
    o.block_size = 4;
    return o;
  }
  std::vector<int32_t> RandomTokens(int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng_() % kVocab);
    return t;
  }
  GenerationRequest RandomRequest() {
    GenerationRequest r;
    r.prompt = RandomTokens(1 + static_cast<int>(rng_() % 48));
    r.max_tokens = 1 + static_cast<int64_t>(rng_() % 12);
    r.ignore_eos = true;
    if (rng_() % 2) {
      r.sampling.temperature = 0.7f;
      r.sampling.seed = rng_();
    } else {
      r.sampling.temperature = 0;
    }
    return r;
  }
  void ExpectSameAsAlone(const GenerationResult& got, const std::string& what) {
    const std::string d = BitDifference(got, alone_[0]);
    EXPECT_TRUE(d.empty()) << what << ": " << d;
  }

  static TempDir* dir_;
  static int store_count_;
  std::unique_ptr<Group> group_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  GenerationRequest target_;
  std::vector<GenerationResult> alone_;
};
TempDir* BatchInvarianceTest::dir_ = nullptr;
int BatchInvarianceTest::store_count_ = 0;

TEST_P(BatchInvarianceTest, ChunkedPrefillOfAnySizeGivesTheSameBits) {
  for (int64_t chunk : {1, 2, 5, 16, 36, 37}) {
    EngineOptions o = Options();
    o.model.max_num_tokens = chunk;
    const std::vector<GenerationResult> got = group_->GenerateOnce(model(), o, {target_});
    ASSERT_EQ(got.size(), 1u);
    ExpectSameAsAlone(got[0], absl::StrCat("prefill in chunks of ", chunk));
  }
}

// Random makeups: 1 to 64 others of 1-48 prompt tokens, the request anywhere
// among them, under step budgets that mix its prefill (whole or chunked) with
// their prefills and decodes, and block sizes 1 to 16.
TEST_P(BatchInvarianceTest, AnyBatchMakeupGivesTheSameBits) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  const int64_t budgets[] = {2048, 64, 13};
  const int32_t block_sizes[] = {4, 1, 16};
  int round = 0;
  for (int others : {1, 3, 17, 64}) {
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < others; ++i) requests.push_back(RandomRequest());
    const size_t at = static_cast<size_t>(rng_() % (requests.size() + 1));
    requests.insert(requests.begin() + static_cast<std::ptrdiff_t>(at), target_);
    EngineOptions o = Options();
    o.model.max_num_tokens = budgets[round % 3];
    o.block_size = block_sizes[round % 3];
    ++round;
    const std::string what = absl::StrCat("among ", others, " others at position ", at, ", step budget ",
                                          o.model.max_num_tokens, ", block size ", o.block_size);
    const std::vector<GenerationResult> got = group_->GenerateOnce(model(), o, requests);
    ASSERT_EQ(got.size(), requests.size()) << what;
    ExpectSameAsAlone(got[at], what);
  }
}

// The prompt's first 8 blocks from the cache: after a request that shares
// them (and the prompt itself, once more: all but its last block cached).
TEST_P(BatchInvarianceTest, APrefixFromTheCacheGivesTheSameBits) {
  EngineOptions o = Options();
  o.num_blocks = 64;  // fixed: the cache (and its prefix index) outlives each Generate
  RankEngines engines = group_->Create(model(), o);
  GenerationRequest sharer = RandomRequest();
  sharer.prompt.assign(target_.prompt.begin(), target_.prompt.begin() + 33);
  sharer.prompt.push_back(5);
  ASSERT_EQ(engines.Generate({sharer}).size(), 1u);
  for (const char* what : {"after a request sharing 33 prompt tokens", "the same prompt once more"}) {
    GenerationStats stats;
    const std::vector<GenerationResult> got = engines.Generate({target_}, &stats);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_GE(got[0].cached_tokens, 32) << what << ": the prefix was not found";
    ExpectSameAsAlone(got[0], what);
  }
}

// Two requests in a pool too small for both to finish: the later one (the
// request under test) is preempted and recomputed, from the prefix cache or
// whole.
TEST_P(BatchInvarianceTest, PreemptionAndRecomputeGiveTheSameBits) {
  GenerationRequest first = RandomRequest();
  first.prompt = RandomTokens(16);
  first.max_tokens = 30;
  for (bool prefix_cache : {true, false}) {
    EngineOptions o = Options();
    o.num_blocks = 15;  // blocks of 4: 4 + 10 to start, each grows by one every 4 tokens
    o.enable_prefix_caching = prefix_cache;
    GenerationStats stats;
    const std::vector<GenerationResult> got = group_->GenerateOnce(model(), o, {first, target_}, &stats);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_GT(stats.preemptions, 0) << "nothing was preempted";
    ExpectSameAsAlone(got[1], absl::StrCat("preempted and recomputed, prefix cache ", prefix_cache ? "on" : "off"));
  }
}

std::vector<int> TensorParallelSizes() {
#if defined(TPSERVE_WITH_GLOO)
  return {1, 2};
#else
  return {1};
#endif
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, BatchInvarianceTest, ::testing::ValuesIn(TensorParallelSizes()),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat("tp", info.param); });

}  // namespace
}  // namespace tpserve
