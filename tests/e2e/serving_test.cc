// End to end, real processes: coordinator + 2 CPU workers (--spawn-workers)
// give the offline engine's greedy tokens for Llama 3 and Qwen3 models, with
// text, token-id and chat input; 64 concurrent streams; prefix caching;
// preemption under a tiny KV pool.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/e2e/harness.h"
#include "tests/testing/seed.h"

namespace tpserve::e2e {
namespace {

namespace v1 = tpserve::v1;

class ServingTest : public ::testing::TestWithParam<std::string> {
 protected:
  TempDir dir_;
};

TEST_P(ServingTest, GreedyTokensEqualTheOfflineEngineForTextIdsAndChat) {
  const std::string model = MakeModel(dir_.path(), GetParam(), {"--seed", "11"});
  Coordinator c = StartCoordinator(model, 2, dir_.path() + "/coordinator.log");
  ASSERT_TRUE(c.stub) << "no coordinator";
  const int n = 9;

  v1::GenerateRequest text = Greedy(n);
  text.set_prompt("The quick brown fox jumps over the lazy dog");
  v1::GenerateRequest ids = Greedy(n);
  for (uint32_t id : {5u, 17u, 42u, 3u, 99u, 7u, 250u}) ids.mutable_prompt_token_ids()->add_ids(id);
  v1::GenerateRequest chat = Greedy(n);
  auto* sys = chat.mutable_chat()->add_messages();
  sys->set_role("system");
  sys->set_content("You are terse.");
  auto* user = chat.mutable_chat()->add_messages();
  user->set_role("user");
  user->set_content("What is two plus two?");

  v1::TokenizeRequest tok_text;
  tok_text.set_text(text.prompt());
  tok_text.set_add_special_tokens(true);
  v1::TokenizeRequest tok_chat;
  *tok_chat.mutable_chat() = chat.chat();
  const std::vector<std::vector<int32_t>> prompts = {
      Tokenize(*c.stub, tok_text),
      {ids.prompt_token_ids().ids().begin(), ids.prompt_token_ids().ids().end()},
      Tokenize(*c.stub, tok_chat)};
  ASSERT_GT(prompts[2].size(), prompts[0].size()) << "the chat template added nothing";
  const auto expected = OfflineGreedy(model, 2, prompts, n, dir_.path());
  ASSERT_EQ(expected.size(), 3u);

  int i = 0;
  for (const v1::GenerateRequest* r : {&text, &ids, &chat}) {
    GenerateOutcome o = Generate(*c.stub, *r);
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    ASSERT_TRUE(o.completed);
    EXPECT_EQ(o.tokens, expected[i]) << "input " << i;
    EXPECT_EQ(o.complete.finish_reason(), v1::LENGTH);
    EXPECT_EQ(o.complete.usage().prompt_tokens(), prompts[i].size());
    EXPECT_EQ(o.complete.usage().completion_tokens(), static_cast<uint32_t>(n));
    ++i;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ServingTest, ::testing::Values("llama", "qwen3"));

class ServingLoadTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

// Both worker transports: shared memory (auto picks it: the workers are on
// this host) and the gRPC streams.
class ServingTransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  TempDir dir_;
};

TEST_P(ServingTransportTest, SixtyFourConcurrentStreamsGetIndependentCorrectOutputs) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const std::string model = MakeModel(dir_.path(), "qwen3", {"--seed", "5"});
  const std::string log = dir_.path() + "/coordinator.log";
  Coordinator c = StartCoordinator(model, 2, log, {"--worker-transport", GetParam()});
  ASSERT_TRUE(c.stub);
  EXPECT_NE(c.process->Log().find(GetParam() == "grpc" ? "worker transport: gRPC streams"
                                                        : "worker transport: shared memory"),
            std::string::npos)
      << c.process->Log();
  const int kStreams = 64;
  std::vector<std::vector<int32_t>> prompts(kStreams);
  std::vector<int> lengths(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    prompts[i].resize(1 + rng() % 29);
    for (auto& t : prompts[i]) t = static_cast<int32_t>(rng() % 400);
    lengths[i] = 1 + static_cast<int>(rng() % 13);
  }
  const int max_n = 13;
  const auto expected = OfflineGreedy(model, 2, prompts, max_n, dir_.path());
  ASSERT_EQ(expected.size(), static_cast<size_t>(kStreams));

  std::vector<GenerateOutcome> got(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest r = Greedy(lengths[i]);
      for (int32_t t : prompts[i]) r.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(t));
      got[i] = Generate(*c.stub, r);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << "stream " << i << ": " << got[i].status.error_message();
    const std::vector<int32_t> want(expected[i].begin(), expected[i].begin() + lengths[i]);
    EXPECT_EQ(got[i].tokens, want) << "stream " << i;
  }
  const v1::ServerInfo info = ServerInfo(*c.stub);
  EXPECT_EQ(info.free_blocks(), info.num_blocks());
  EXPECT_EQ(info.running(), 0u);
}

INSTANTIATE_TEST_SUITE_P(WorkerTransport, ServingTransportTest, ::testing::Values("auto", "grpc", "shm"));

TEST_F(ServingLoadTest, SamePromptTwiceIsServedFromThePrefixCache) {
  const std::string model = MakeModel(dir_.path(), "llama", {"--seed", "2"});
  Coordinator c = StartCoordinator(model, 2, dir_.path() + "/coordinator.log", {"--block-size", "8"});
  ASSERT_TRUE(c.stub);
  v1::GenerateRequest r = Greedy(6);
  r.set_prompt("a long shared system prompt that fills several KV blocks of eight tokens each, and then some");
  GenerateOutcome first = Generate(*c.stub, r);
  GenerateOutcome second = Generate(*c.stub, r);
  ASSERT_TRUE(first.status.ok() && second.status.ok()) << first.status.error_message() << second.status.error_message();
  EXPECT_EQ(first.complete.usage().cached_tokens(), 0u);
  EXPECT_GT(second.complete.usage().cached_tokens(), 0u);
  EXPECT_EQ(second.complete.usage().cached_tokens() % 8, 0u);
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_GT(ServerInfo(*c.stub).prefix_cache_hit_rate(), 0.0);
}

TEST_F(ServingLoadTest, PreemptionUnderATinyKvPoolKeepsTheOutputs) {
  const std::string model = MakeModel(dir_.path(), "qwen3", {"--seed", "8"});
  // 12 blocks of 4 tokens: eight sequences of up to 17 + 20 tokens cannot all fit.
  Coordinator c = StartCoordinator(model, 2, dir_.path() + "/coordinator.log",
                                   {"--block-size", "4", "--num-gpu-blocks-override", "12"});
  ASSERT_TRUE(c.stub);
  std::mt19937 rng(77);
  const int kStreams = 8, n = 20;
  std::vector<std::vector<int32_t>> prompts(kStreams);
  for (auto& p : prompts) {
    p.resize(5 + rng() % 13);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 400);
  }
  const auto expected = OfflineGreedy(model, 2, prompts, n, dir_.path());
  ASSERT_EQ(expected.size(), static_cast<size_t>(kStreams));
  std::vector<GenerateOutcome> got(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest r = Greedy(n);
      for (int32_t t : prompts[i]) r.mutable_prompt_token_ids()->add_ids(static_cast<uint32_t>(t));
      got[i] = Generate(*c.stub, r);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << "stream " << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, expected[i]) << "stream " << i;
  }
  EXPECT_EQ(ServerInfo(*c.stub).num_blocks(), 12u);
}

}  // namespace
}  // namespace tpserve::e2e
