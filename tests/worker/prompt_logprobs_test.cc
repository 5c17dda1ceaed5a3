// Prompt log-probs (SamplingParams::prompt_logprobs, worker/prompt_logprobs.h)
// through the offline engine (the serving scheduler and step runner), held to
// the independent float64 forward (tools/reference_forward.py
// --prompt-logprobs) at every prompt position: prompts shorter and longer
// than a prefill chunk, several passes of the LM head per chunk, a prompt
// whose prefix is in the prefix cache (recomputed: never read from it), a
// prompt preempted half-way, other requests in the same steps, at tp 1 and tp 2 (two ranks as threads over
// gloo; vocab 397 leaves padding in rank 1's shard).
//
// Tolerance: the CPU backend's fp32 logits agree with the float64 forward to
// a relative error of 1e-4 of the row's largest logit (tests/worker/tp_test.cc
// holds them to it: eps below). A log-prob is x_t - logsumexp(x), computed in
// double from those fp32 logits, so its error is at most |dx_t| + max_j |dx_j|
// <= 2 eps max|x|, plus its own rounding to float (2^-24 of its magnitude).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/testing/rank_engines.h"
#include "tests/testing/seed.h"
#include "tests/worker/worker_test_util.h"
#include "worker/engine.h"

namespace tpserve {
namespace {

using testing_util::CpuRankGroup;
using testing_util::RankEngines;
using testing_util::TempDir;

constexpr int32_t kVocab = 397;
constexpr int32_t kTop = 3;
constexpr int64_t kChunk = 16;        // max_num_batched_tokens: a prefill chunk
constexpr double kLogitsRelError = 1e-4;  // fp32 CPU logits vs float64 (tp_test.cc)

// What the float64 forward says at prompt position p (p >= 1).
struct RefPosition {
  int32_t token = 0;
  double logprob = 0;
  int32_t rank = 0;
  std::vector<std::pair<int32_t, double>> top;
  std::vector<double> logits;  // [V] of position p - 1
  double max_abs_logit = 0;    // the scale of the row's error bound
};

class PromptLogprobsTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch qwen3 --hidden 80 --intermediate 200 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 397 --dtype f32 --tie 0 --seed 43");
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    group_ = CpuRankGroup::Make(GetParam(), dir_->path() / absl::StrCat("store-", store_count_++));
    ASSERT_NE(group_, nullptr);
    rng_.seed(testing_util::TestSeed());
  }

  static std::filesystem::path model() { return dir_->path() / "m"; }
  static EngineOptions Options() {
    EngineOptions o;
    o.block_size = 4;
    o.model.max_num_tokens = kChunk;
    // The LM head's workspace holds 4 rows: a 16-token chunk scores its
    // prompt rows in 4 passes (Model::TokenLogits).
    o.model.max_num_seqs = 4;
    return o;
  }
  std::vector<int32_t> RandomTokens(int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng_() % kVocab);
    return t;
  }
  static GenerationRequest WithPromptLogprobs(std::vector<int32_t> prompt) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = 2;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.sampling.prompt_logprobs = kTop;
    return r;
  }

  // The float64 forward's prompt log-probs of `prompt` ([0] unused).
  static std::vector<RefPosition> Reference(const std::vector<int32_t>& prompt) {
    const std::string python = testing_util::PythonWithNumpy();
    if (python.empty()) return {};
    std::string ids;
    for (int32_t t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    const std::string cmd = python + " " + TPSERVE_SOURCE_DIR + "/tools/reference_forward.py " + model().string() +
                            " --prompt-ids " + ids + " --steps 1 --prompt-logprobs " + std::to_string(kTop);
    std::string out;
    EXPECT_EQ(testing_util::RunCommand(cmd, &out), 0) << cmd;
    const nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    std::vector<RefPosition> ref(prompt.size());
    if (!j.is_object() || !j.contains("prompt_logprobs")) {
      ADD_FAILURE() << "reference_forward.py printed no prompt_logprobs: " << out.substr(0, 200);
      return {};
    }
    for (size_t p = 1; p < prompt.size(); ++p) {
      const nlohmann::json& e = j["prompt_logprobs"][p];
      RefPosition& r = ref[p];
      r.token = e["token"].get<int32_t>();
      r.logprob = e["logprob"].get<double>();
      r.rank = e["rank"].get<int32_t>();
      for (const auto& t : e["top"]) r.top.emplace_back(t[0].get<int32_t>(), t[1].get<double>());
      r.logits = e["logits"].get<std::vector<double>>();
      for (double x : r.logits) r.max_abs_logit = std::max(r.max_abs_logit, std::abs(x));
    }
    return ref;
  }

  // Every position of `got` against the reference, within the bound above.
  static void ExpectMatches(const std::vector<ScoredToken>& got, const std::vector<int32_t>& prompt,
                            const std::string& what) {
    const std::vector<RefPosition> ref = Reference(prompt);
    if (ref.empty()) GTEST_SKIP() << "python3 with numpy not found: scripts/install-deps.sh installs python3-numpy";
    ASSERT_EQ(got.size() + 1, prompt.size()) << what << ": one entry per prompt position after the first";
    for (size_t p = 1; p < prompt.size(); ++p) {
      const ScoredToken& g = got[p - 1];
      const RefPosition& r = ref[p];
      const double tol = 2 * kLogitsRelError * r.max_abs_logit + 0x1p-24 * std::abs(r.logprob);
      SCOPED_TRACE(testing::Message() << what << ", position " << p << " (tolerance " << tol << ")");
      EXPECT_EQ(g.scored.token, prompt[p]);
      EXPECT_NEAR(g.scored.logprob, r.logprob, tol);
      ASSERT_EQ(g.scored.top.size(), static_cast<size_t>(kTop));
      for (int k = 0; k < kTop; ++k) {
        EXPECT_NEAR(g.scored.top[k].second, r.top[k].second, tol) << "top " << k;
        // The id is the reference's unless a neighbour is within the bounds of both.
        const bool tied = (k > 0 && r.top[k - 1].second - r.top[k].second <= 2 * tol) ||
                          (k + 1 < kTop && r.top[k].second - r.top[k + 1].second <= 2 * tol);
        if (!tied) {
          EXPECT_EQ(g.scored.top[k].first, r.top[k].first) << "top " << k;
        }
      }
      // fp32 logits y_j = x_j + e_j, |e_j| <= eps M: y_j > y_t needs x_j > x_t - 2 eps M.
      const double window = 2 * kLogitsRelError * r.max_abs_logit, xt = r.logits[static_cast<size_t>(prompt[p])];
      int32_t surely = 1, maybe = 1;
      for (size_t j = 0; j < r.logits.size(); ++j) {
        if (j == static_cast<size_t>(prompt[p])) continue;
        surely += r.logits[j] > xt + window;
        maybe += r.logits[j] > xt - window;
      }
      EXPECT_GE(g.rank, surely);
      EXPECT_LE(g.rank, maybe);
    }
  }

  static TempDir* dir_;
  static int store_count_;
  std::unique_ptr<CpuRankGroup> group_;
  std::mt19937_64 rng_;
};
TempDir* PromptLogprobsTest::dir_ = nullptr;
int PromptLogprobsTest::store_count_ = 0;

// A 5-token prompt (one chunk) and a 41-token one (3 chunks of 16, each in 4
// passes of the head) in the same steps as a request without them.
TEST_P(PromptLogprobsTest, EveryPromptPositionMatchesTheFloat64Forward) {
  const std::vector<int32_t> short_prompt = RandomTokens(5), long_prompt = RandomTokens(41);
  GenerationRequest plain;
  plain.prompt = RandomTokens(9);
  plain.max_tokens = 3;
  plain.ignore_eos = true;
  plain.sampling.temperature = 0;
  const std::vector<GenerationResult> got = group_->GenerateOnce(
      model(), Options(), {WithPromptLogprobs(short_prompt), plain, WithPromptLogprobs(long_prompt)});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[1].prompt_logprobs.empty()) << "a request that did not ask has none";
  ExpectMatches(got[0].prompt_logprobs, short_prompt, "5-token prompt");
  ExpectMatches(got[2].prompt_logprobs, long_prompt, "41-token prompt over 3 chunks");
}

// The prompt's prefix is in the prefix cache (a request without prompt
// log-probs computed it): the request still computes every position, and
// reports no cached tokens; the one without them reads the cache.
TEST_P(PromptLogprobsTest, ACachedPrefixIsRecomputed) {
  const std::vector<int32_t> prompt = RandomTokens(30);
  RankEngines engines = group_->Create(model(), Options());
  GenerationRequest plain = WithPromptLogprobs(prompt);
  plain.sampling.prompt_logprobs = -1;
  ASSERT_EQ(engines.Generate({plain}).size(), 1u);  // fills the cache
  const std::vector<GenerationResult> again = engines.Generate({plain});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].cached_tokens, 28) << "the cache holds the prompt's 7 full blocks";
  const std::vector<GenerationResult> got = engines.Generate({WithPromptLogprobs(prompt)});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].cached_tokens, 0);
  EXPECT_EQ(got[0].tokens, again[0].tokens) << "the same greedy tokens either way";
  ExpectMatches(got[0].prompt_logprobs, prompt, "30-token prompt with its prefix cached");
}

// Too few KV blocks for both: the later request is preempted in the middle
// of its prompt and recomputes it from the start (it never reads the cache);
// the positions it scored before count once.
TEST_P(PromptLogprobsTest, APreemptedPromptIsScoredOnce) {
  const std::vector<int32_t> a = RandomTokens(41), b = RandomTokens(37);
  EngineOptions options = Options();
  options.num_blocks = 16;  // 11 + 10 blocks wanted at once
  GenerationStats stats;
  const std::vector<GenerationResult> got =
      group_->GenerateOnce(model(), options, {WithPromptLogprobs(a), WithPromptLogprobs(b)}, &stats);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_GT(stats.preemptions, 0) << "the case needs a preemption";
  ExpectMatches(got[0].prompt_logprobs, a, "41-token prompt");
  ExpectMatches(got[1].prompt_logprobs, b, "37-token prompt, preempted");
}

INSTANTIATE_TEST_SUITE_P(Tp, PromptLogprobsTest, ::testing::Values(1, 2),
                         [](const auto& info) { return absl::StrCat("tp", info.param); });

}  // namespace
}  // namespace tpserve
