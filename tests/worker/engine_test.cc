// The offline engine on one rank: continuous batching, chunked prefill,
// preemption, the prefix cache and block sizes do not change what is generated.
#include "worker/engine.h"

#include <cstring>
#include <fstream>
#include <random>

#include "backend/cpu_backend.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/worker/device_logits_sampler.h"
#include "tests/worker/worker_test_util.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch llama --hidden 64 --intermediate 112 --layers 2 --heads 4 --kv-heads 2 "
                            "--vocab 311 --dtype f32 --tie 1 --seed 31");
  }
  static void TearDownTestSuite() { delete dir_; }

  std::vector<GenerationResult> Generate(const std::vector<GenerationRequest>& requests, EngineOptions options,
                                         GenerationStats* stats = nullptr,
                                         const std::filesystem::path& model = dir_->path() / "m") {
    options.return_logits = true;
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(model, *backend_, *comm_, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return {};
    absl::StatusOr<std::vector<GenerationResult>> out = (*engine)->Generate(requests);
    EXPECT_TRUE(out.ok()) << out.status();
    if (stats != nullptr) *stats = (*engine)->last_stats();
    return out.ok() ? *out : std::vector<GenerationResult>{};
  }

  std::vector<GenerationRequest> RandomRequests(std::mt19937& rng, int n, float temperature) {
    std::vector<GenerationRequest> reqs(static_cast<size_t>(n));
    for (size_t i = 0; i < reqs.size(); ++i) {
      const int len = 1 + static_cast<int>(rng() % 19);
      for (int t = 0; t < len; ++t) reqs[i].prompt.push_back(static_cast<int32_t>(rng() % 311));
      reqs[i].max_tokens = 1 + static_cast<int64_t>(rng() % 13);
      reqs[i].ignore_eos = true;
      reqs[i].sampling.temperature = temperature;
      reqs[i].sampling.seed = rng();
    }
    return reqs;
  }

  // The same tokens and the same logits, bit for bit: the CPU backend is
  // batch-invariant (docs/architecture.md, "The CPU backend's numerics").
  static void ExpectSame(const std::vector<GenerationResult>& got, const std::vector<GenerationResult>& want,
                         const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ", request " << i;
      ASSERT_EQ(got[i].logits.size(), got[i].tokens.size()) << what << ": one logits row per token";
      ASSERT_EQ(got[i].logits.size(), want[i].logits.size()) << what;
      for (size_t s = 0; s < got[i].logits.size(); ++s) {
        ASSERT_EQ(got[i].logits[s].size(), want[i].logits[s].size()) << what;
        EXPECT_EQ(0, std::memcmp(got[i].logits[s].data(), want[i].logits[s].data(),
                                 got[i].logits[s].size() * sizeof(float)))
            << what << ", request " << i << ": token " << s << "'s logits differ in their bits";
      }
    }
  }

  static TempDir* dir_;
  std::unique_ptr<Backend> backend_ = MakeCpuBackend();
  std::unique_ptr<Communicator> comm_ = MakeSoloCommunicator();
};
TempDir* EngineTest::dir_ = nullptr;

TEST_F(EngineTest, BatchingChunkingPreemptionAndBlockSizeDoNotChangeTheOutput) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (float temperature : {0.0f, 0.9f}) {
    SCOPED_TRACE(testing::Message() << "temperature " << temperature);
    const std::vector<GenerationRequest> reqs = RandomRequests(rng, 7, temperature);
    const std::vector<GenerationResult> batched = Generate(reqs, EngineOptions{});
    ASSERT_EQ(batched.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(std::ssize(batched[i].tokens), reqs[i].max_tokens);
      EXPECT_EQ(batched[i].finish_reason, FinishReason::kLength);
      const std::vector<GenerationResult> alone = Generate({reqs[i]}, EngineOptions{});
      ExpectSame(alone, {batched[i]}, "alone");
    }
    EngineOptions chunked;
    chunked.model.max_num_tokens = 5;  // prompts of up to 19 tokens go in chunks
    GenerationStats stats;
    ExpectSame(Generate(reqs, chunked, &stats), batched, "chunked prefill");
    EngineOptions few_seqs;
    few_seqs.model.max_num_seqs = 2;
    ExpectSame(Generate(reqs, few_seqs), batched, "2 sequences per step");
    for (int32_t bs : {1, 7}) {
      EngineOptions o;
      o.block_size = bs;
      ExpectSame(Generate(reqs, o), batched, "block size " + std::to_string(bs));
    }
    EngineOptions scarce;  // blocks for the longest request only
    scarce.block_size = 4;
    scarce.num_blocks = 8;
    ExpectSame(Generate(reqs, scarce, &stats), batched, "scarce blocks");

    // Preemption for certain: two 4-token prompts fit one block each and start
    // together, but growing to 16 tokens each needs 8 blocks of the 6 there are.
    std::vector<GenerationRequest> pair(2);
    for (GenerationRequest& r : pair) {
      for (int t = 0; t < 4; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % 311));
      r.max_tokens = 12;
      r.ignore_eos = true;
      r.sampling = reqs[0].sampling;
    }
    const std::vector<GenerationResult> pair_roomy = Generate(pair, EngineOptions{});
    EngineOptions tight;
    tight.block_size = 4;
    tight.num_blocks = 6;
    ExpectSame(Generate(pair, tight, &stats), pair_roomy, "preemption");
    EXPECT_GT(stats.preemptions, 0);
    tight.enable_prefix_caching = false;  // the recompute computes everything again
    ExpectSame(Generate(pair, tight, &stats), pair_roomy, "preemption without the prefix cache");
    EXPECT_GT(stats.preemptions, 0);
  }
}

// Four prompts share a 13-token prefix (three full blocks of 4 tokens) and
// run one at a time, so each later one finds the prefix in the cache.
TEST_F(EngineTest, ThePrefixCacheServesSharedPrefixesWithoutChangingTheOutput) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> prefix(13);
  for (int32_t& t : prefix) t = static_cast<int32_t>(rng() % 311);
  for (float temperature : {0.0f, 0.9f}) {
    SCOPED_TRACE(testing::Message() << "temperature " << temperature);
    std::vector<GenerationRequest> reqs(4);
    for (GenerationRequest& r : reqs) {
      r.prompt = prefix;
      const int suffix = 1 + static_cast<int>(rng() % 5);
      for (int t = 0; t < suffix; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % 311));
      r.max_tokens = 6;
      r.ignore_eos = true;
      r.sampling.temperature = temperature;
      r.sampling.seed = rng();
    }
    EngineOptions on;
    on.block_size = 4;
    on.model.max_num_seqs = 1;
    EngineOptions off = on;
    off.enable_prefix_caching = false;
    GenerationStats on_stats, off_stats;
    const std::vector<GenerationResult> cached = Generate(reqs, on, &on_stats);
    const std::vector<GenerationResult> plain = Generate(reqs, off, &off_stats);
    ExpectSame(cached, plain, "prefix cache on against off");
    ASSERT_EQ(cached.size(), reqs.size());
    EXPECT_EQ(cached[0].cached_tokens, 0);
    for (size_t i = 1; i < cached.size(); ++i) EXPECT_EQ(cached[i].cached_tokens, 12) << "request " << i;
    EXPECT_EQ(on_stats.cached_tokens, 3 * 12);
    EXPECT_EQ(off_stats.cached_tokens, 0);
    EXPECT_EQ(on_stats.prefill_tokens + on_stats.decode_tokens + 3 * 12,
              off_stats.prefill_tokens + off_stats.decode_tokens) << "cached tokens are not computed";
  }
}

// The cache (and its prefix cache) outlives a Generate call: the same prompt
// again computes only what is not cached, and gives the same greedy tokens.
TEST_F(EngineTest, ALaterCallReusesThePrefixCache) {
  EngineOptions options;
  options.block_size = 4;
  options.return_logits = true;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(dir_->path() / "m", *backend_, *comm_, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<GenerationRequest> reqs(1);
  reqs[0].prompt = {9, 8, 7, 6, 5, 4, 3, 2, 1, 10};
  reqs[0].max_tokens = 5;
  reqs[0].ignore_eos = true;
  reqs[0].sampling.temperature = 0;
  absl::StatusOr<std::vector<GenerationResult>> first = (*engine)->Generate(reqs);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)[0].cached_tokens, 0);
  absl::StatusOr<std::vector<GenerationResult>> second = (*engine)->Generate(reqs);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)[0].cached_tokens, 8) << "two full blocks of the 10-token prompt";
  EXPECT_EQ((*engine)->last_stats().cached_tokens, 8);
  ExpectSame(*second, *first, "second call");
}

TEST_F(EngineTest, ADeviceSamplerGivesTheSameTokens) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const std::vector<GenerationRequest> reqs = RandomRequests(rng, 6, 0.8f);
  EngineOptions chunked;
  chunked.model.max_num_tokens = 7;  // chunked prompts: rows that are not sampled
  const std::vector<GenerationResult> want = Generate(reqs, chunked);

  testing_util::DeviceLogitsSampler sampler;
  chunked.sampler = &sampler;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(dir_->path() / "m", *backend_, *comm_, chunked);
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<std::vector<GenerationResult>> got = (*engine)->Generate(reqs);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*got)[i].tokens, want[i].tokens) << "request " << i;
  EXPECT_GT(sampler.calls, 0);
  EXPECT_GT(sampler.skipped, 0) << "some prompts of up to 19 tokens were chunked by 7";
}

TEST_F(EngineTest, StopsAtTheEndOfSequenceToken) {
  // Make the third greedy token of a prompt the model's EOS and generate again.
  std::vector<GenerationRequest> reqs(1);
  reqs[0].prompt = {5, 6, 7, 8};
  reqs[0].max_tokens = 10;
  reqs[0].sampling.temperature = 0;
  reqs[0].ignore_eos = true;
  const std::vector<GenerationResult> free_run = Generate(reqs, EngineOptions{});
  ASSERT_EQ(free_run.size(), 1u);
  const int32_t eos = free_run[0].tokens[2];
  const size_t first = static_cast<size_t>(std::find(free_run[0].tokens.begin(), free_run[0].tokens.end(), eos) -
                                           free_run[0].tokens.begin());
  const std::filesystem::path copy = dir_->path() / "eos";
  std::filesystem::copy(dir_->path() / "m", copy);
  nlohmann::json config, gen;
  std::ifstream(copy / "config.json") >> config;
  config["eos_token_id"] = eos;
  std::ofstream(copy / "config.json") << config.dump();
  std::filesystem::remove(copy / "generation_config.json");
  reqs[0].ignore_eos = false;
  const std::vector<GenerationResult> stopped = Generate(reqs, EngineOptions{}, nullptr, copy);
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0].finish_reason, FinishReason::kEos);
  EXPECT_EQ(stopped[0].tokens, std::vector<int32_t>(free_run[0].tokens.begin(),
                                                    free_run[0].tokens.begin() + static_cast<std::ptrdiff_t>(first) + 1));
}

TEST_F(EngineTest, LogprobsComeWithEachTokenWhenAsked) {
  std::vector<GenerationRequest> reqs(2);
  reqs[0].prompt = {1, 2, 3};
  reqs[0].max_tokens = 4;
  reqs[0].sampling.temperature = 0;
  reqs[0].sampling.logprobs = 0;
  reqs[0].ignore_eos = true;
  reqs[1] = reqs[0];
  reqs[1].sampling.logprobs = -1;
  const std::vector<GenerationResult> out = Generate(reqs, EngineOptions{});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].logprobs.size(), 4u);
  EXPECT_TRUE(out[1].logprobs.empty());
  for (float lp : out[0].logprobs) {
    EXPECT_LE(lp, 0.0f);
    EXPECT_GT(lp, -30.0f);
  }
}

TEST_F(EngineTest, BadRequestsAreInvalidArgumentNamingTheRequest) {
  EngineOptions options;
  options.num_blocks = 4;
  options.block_size = 4;
  options.model.max_position = 64;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(dir_->path() / "m", *backend_, *comm_, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto check = [&](const std::function<void(GenerationRequest&)>& edit, const std::string& words) {
    std::vector<GenerationRequest> reqs(2);
    for (auto& r : reqs) {
      r.prompt = {1, 2};
      r.max_tokens = 2;
    }
    edit(reqs[1]);
    const absl::Status s = (*engine)->Generate(reqs).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << words << ": " << s;
    EXPECT_NE(std::string(s.message()).find("request 1"), std::string::npos) << s;
    EXPECT_NE(std::string(s.message()).find(words), std::string::npos) << s;
  };
  check([](GenerationRequest& r) { r.prompt.clear(); }, "empty");
  check([](GenerationRequest& r) { r.prompt[1] = 311; }, "311");
  check([](GenerationRequest& r) { r.max_tokens = 0; }, "max_tokens");
  check([](GenerationRequest& r) { r.max_tokens = 63; }, "64 positions");
  check([](GenerationRequest& r) { r.max_tokens = 15; }, "KV blocks");
  check([](GenerationRequest& r) { r.sampling.temperature = -1; }, "temperature");
  // The engine still works after refusing requests.
  std::vector<GenerationRequest> ok(1);
  ok[0].prompt = {3};
  ok[0].max_tokens = 3;
  EXPECT_TRUE((*engine)->Generate(ok).ok());
}

}  // namespace
}  // namespace tpserve
