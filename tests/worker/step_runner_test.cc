// StepRunner: the coordinator's step diffs (new / continuing / finished) give
// the same tokens as the offline engine, through chunked prefill, a cached
// prefix shared with another sequence, decodes and a preemption; bad plans are
// rejected without changing the state.
#include "worker/step_runner.h"

#include <algorithm>
#include <random>
#include <span>
#include <string>

#include "backend/cpu_backend.h"
#include "backend/step_batch.h"
#include "gtest/gtest.h"
#include "tests/worker/device_logits_sampler.h"
#include "tests/worker/worker_test_util.h"
#include "worker/engine.h"
#include "tests/testing/seed.h"
#include "tests/testing/step_runner_fixture.h"

namespace tpserve {
namespace {

using testing_util::Chunk;
using testing_util::TempDir;

constexpr int32_t kVocab = 301;
constexpr int32_t kBlockSize = 4;
constexpr int64_t kNumBlocks = 97;

using testing_util::TestSeed;

// What the coordinator knows of one sequence (a miniature of its scheduler).
using Seq = testing_util::ChunkedSequence;

class StepRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 301 --dtype f32 --tie 0 --seed 23");
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    seed_ = TestSeed();
    rng_.seed(seed_);
    stack_.backend = MakeCpuBackend();
    ModelOptions options;
    options.max_num_tokens = 64;
    options.max_num_seqs = 8;
    const absl::Status loaded = stack_.Load(dir_->path() / "m", options, kNumBlocks, kBlockSize);
    ASSERT_TRUE(loaded.ok()) << loaded;
    stack_.MakeRunner();
  }

  std::vector<int32_t> RandomTokens(int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng_() % kVocab);
    return t;
  }

  // The offline engine's tokens for `seqs` (prompts, sampling, max_tokens).
  std::vector<std::vector<int32_t>> EngineTokens(const std::vector<Seq>& seqs) {
    EngineOptions options;
    options.block_size = 16;
    return testing_util::EngineTokens(dir_->path() / "m", *stack_.backend, *stack_.comm, seqs, options);
  }

  // Builds the step that computes `n` more tokens of each scheduled sequence
  // (allocating the blocks they need), runs it and appends the sampled tokens.
  // Returns the number of tokens sampled.
  size_t Step(const std::vector<Chunk>& scheduled, std::vector<uint64_t> finished = {}) {
    absl::StatusOr<std::vector<StepToken>> got = stack_.runner->Run(planner_.Plan(scheduled, std::move(finished)));
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return 0;
    testing_util::ChunkPlanner::Commit(scheduled);
    for (const StepToken& t : *got) {
      auto it = std::find_if(scheduled.begin(), scheduled.end(),
                             [&](const Chunk& c) { return c.first->id == t.seq_id; });
      EXPECT_NE(it, scheduled.end()) << "token for unscheduled sequence " << t.seq_id;
      if (it == scheduled.end()) continue;
      EXPECT_EQ(it->first->computed, it->first->all_size()) << "sequence " << t.seq_id << " sampled mid-prefill";
      it->first->output.push_back(t.sampled.token);
    }
    return got->size();
  }

  // Decodes every unfinished sequence until all are done, sending the
  // finished ones in the next step's `finished`.
  void DecodeToEnd(std::vector<Seq*> seqs) {
    std::vector<uint64_t> finished;
    for (int guard = 0; guard < 100; ++guard) {
      std::vector<Chunk> scheduled;
      for (Seq* s : seqs) {
        if (s->done()) {
          if (s->known) {
            finished.push_back(s->id);
            s->known = false;
          }
          continue;
        }
        scheduled.emplace_back(s, s->all_size() - s->computed);
      }
      if (scheduled.empty()) break;
      Step(scheduled, std::exchange(finished, {}));
    }
    if (!finished.empty()) Step({}, finished);
  }

  static TempDir* dir_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  testing_util::StepRunnerStack stack_;
  // Block ids from 3 (odd start: they are the coordinator's, not 0..n); with
  // decode_sampled off, decodes carry their token.
  testing_util::ChunkPlanner planner_{kBlockSize, /*first_block=*/3};
};
TempDir* StepRunnerTest::dir_ = nullptr;

TEST_F(StepRunnerTest, ChunkedPrefillCachedPrefixAndDecodesMatchTheEngine) {
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed_));
  SamplingParams greedy;
  greedy.temperature = 0;
  Seq a{.id = 101, .prompt = RandomTokens(13), .sampling = greedy, .max_tokens = 7};
  Seq b{.id = 7, .prompt = RandomTokens(29), .sampling = greedy, .max_tokens = 9};
  Seq c{.id = 55, .prompt = {}, .sampling = greedy, .max_tokens = 6};
  c.prompt.assign(a.prompt.begin(), a.prompt.begin() + 8);  // two full blocks shared with a
  for (int32_t t : RandomTokens(6)) c.prompt.push_back(t);
  Seq d{.id = 3, .prompt = RandomTokens(1), .sampling = greedy, .max_tokens = 5};  // one-token prompt
  const std::vector<std::vector<int32_t>> want = EngineTokens({a, b, c, d});
  ASSERT_EQ(want.size(), 4u);

  // a: whole prompt; b: first chunk of 10, not sampled.
  EXPECT_EQ(Step({{&b, 10}, {&a, 13}}), 1u);
  EXPECT_EQ(a.output.size(), 1u);
  EXPECT_TRUE(b.output.empty());
  // a decodes; b's second chunk (9 tokens) is still mid-prompt; d is a one-token prefill.
  EXPECT_EQ(Step({{&a, 1}, {&b, 9}, {&d, 1}}), 2u);
  // b's last chunk; c arrives with a cached prefix: a's first two blocks.
  c.blocks.assign(a.blocks.begin(), a.blocks.begin() + 2);
  c.computed = 8;
  EXPECT_EQ(Step({{&a, 1}, {&b, 10}, {&c, 6}, {&d, 1}}), 4u);
  EXPECT_EQ(stack_.runner->num_sequences(), 4);
  DecodeToEnd({&a, &b, &c, &d});
  EXPECT_EQ(stack_.runner->num_sequences(), 0);

  EXPECT_EQ(a.output, want[0]) << "a: whole prompt, then decodes";
  EXPECT_EQ(b.output, want[1]) << "b: prefill in three chunks";
  EXPECT_EQ(c.output, want[2]) << "c: cached prefix of 8 tokens in a's blocks";
  EXPECT_EQ(d.output, want[3]) << "d: one-token prompt";
}

TEST_F(StepRunnerTest, PreemptedSeededSequenceResumesWithTheSameTokens) {
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed_));
  SamplingParams p;
  p.temperature = 1.3f;  // flat: every draw matters
  p.top_k = 40;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.5f;
  p.seed = rng_();
  Seq whole{.id = 1, .prompt = RandomTokens(11), .sampling = p, .max_tokens = 12};
  const std::vector<std::vector<int32_t>> want = EngineTokens({whole});
  ASSERT_EQ(want.size(), 1u);

  Seq s = whole;
  s.id = 2;
  Step({{&s, 11}});
  while (s.output.size() < 5) Step({{&s, 1}});
  // Preempted: dropped, its blocks freed, later recomputed from prompt + output
  // in two chunks (the first not sampled) in fresh blocks.
  s.known = false;
  s.computed = 0;
  s.blocks.clear();
  s.blocks_sent = 0;
  EXPECT_EQ(Step({}, {s.id}), 0u);
  EXPECT_FALSE(stack_.runner->contains(s.id));
  EXPECT_EQ(Step({{&s, 6}}), 0u);
  EXPECT_EQ(Step({{&s, s.all_size() - 6}}), 1u);
  DecodeToEnd({&s});
  EXPECT_EQ(s.output, want[0]) << "preempted after 5 tokens and recomputed";
}

TEST_F(StepRunnerTest, ADeviceSamplerSamplesTheModelsLogitsAndOnlyTheRowsToSample) {
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed_));
  SamplingParams p;
  p.temperature = 1.1f;  // every draw matters: a skipped row that drew would shift the tokens
  p.top_p = 0.9f;
  p.presence_penalty = 0.4f;
  p.seed = rng_();
  SamplingParams q = p;
  q.seed = rng_();
  Seq a{.id = 4, .prompt = RandomTokens(13), .sampling = p, .max_tokens = 6};
  Seq b{.id = 9, .prompt = RandomTokens(21), .sampling = q, .max_tokens = 5};
  const std::vector<std::vector<int32_t>> want = EngineTokens({a, b});
  ASSERT_EQ(want.size(), 2u);

  testing_util::DeviceLogitsSampler sampler;
  stack_.MakeRunner(StepRunnerOptions{.sampler = &sampler});
  EXPECT_EQ(Step({{&b, 10}, {&a, 13}}), 1u);  // b's first chunk is not sampled
  EXPECT_EQ(Step({{&a, 1}, {&b, 11}}), 2u);
  DecodeToEnd({&a, &b});
  EXPECT_EQ(a.output, want[0]);
  EXPECT_EQ(b.output, want[1]) << "b: prefill in two chunks";
  EXPECT_GT(sampler.calls, 2);
  EXPECT_EQ(sampler.skipped, 1) << "only b's first chunk is a row not to sample";
}

TEST_F(StepRunnerTest, BadPlansAreRejectedAndChangeNothing) {
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed_));
  SamplingParams greedy;
  greedy.temperature = 0;
  Seq a{.id = 9, .prompt = RandomTokens(8), .sampling = greedy, .max_tokens = 3};
  const std::vector<std::vector<int32_t>> want = EngineTokens({a});
  Step({{&a, 8}});
  ASSERT_EQ(a.output.size(), 1u);
  // Its first decode (position 8) needs a third block.
  planner_.AllocateBlocks(a, 9);
  const std::vector<int32_t> new_blocks(a.blocks.begin() + static_cast<std::ptrdiff_t>(a.blocks_sent), a.blocks.end());
  auto decode = [&] {
    StepPlan plan;
    plan.continuing.push_back({.seq_id = a.id, .new_block_ids = new_blocks, .token_ids = {a.output.back()}, .sample = true});
    plan.order = {a.id};
    return plan;
  };
  auto expect_invalid = [&](const StepPlan& plan, const std::string& needle) {
    absl::StatusOr<std::vector<StepToken>> got = stack_.runner->Run(plan);
    ASSERT_FALSE(got.ok()) << "accepted a plan that should fail with: " << needle;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_NE(got.status().message().find(needle), std::string::npos) << got.status();
  };
  StepPlan p = decode();
  p.continuing[0].seq_id = 77;
  p.order = {77};
  expect_invalid(p, "does not hold it");
  p = decode();
  p.order = {};
  expect_invalid(p, "order lists 0");
  p = decode();
  p.continuing[0].token_ids = {kVocab};
  expect_invalid(p, "outside the vocabulary");
  p = decode();
  p.continuing[0].new_block_ids = {};
  expect_invalid(p, "send the missing block ids");
  p = decode();
  p.continuing[0].new_block_ids = {int32_t{kNumBlocks}};
  expect_invalid(p, "outside the KV cache");
  p = decode();
  p.continuing[0].decode_sampled = true;
  expect_invalid(p, "decode_sampled and carries token_ids");
  p = decode();
  p.finished = {a.id};
  expect_invalid(p, "continuing and finished");
  p = decode();
  p.new_sequences.push_back({.seq_id = a.id, .prompt = a.prompt, .token_ids = a.prompt, .block_ids = a.blocks});
  p.order.push_back(a.id);
  expect_invalid(p, "already holds it");
  p = decode();
  p.new_sequences.push_back({.seq_id = 500, .prompt = {1, 2, 3}, .token_ids = {1, 3}, .block_ids = {0}});
  p.order.push_back(500);
  expect_invalid(p, "prompt + output has 2");
  p = decode();
  p.new_sequences.push_back({.seq_id = 500, .prompt = {1, 2, 3}, .token_ids = {1, 2, 3}, .block_ids = {0}});
  p.new_sequences.back().sampling.top_p = 0;
  p.order.push_back(500);
  expect_invalid(p, "top_p");
  p = decode();  // copy-on-write: blocks outside the cache, a block onto itself, an entry it does not hold
  p.block_copies = {{.src = 3, .dst = int32_t{kNumBlocks}}};
  expect_invalid(p, "block copy 3 -> 97");
  p = decode();
  p.block_copies = {{.src = 5, .dst = 5}};
  expect_invalid(p, "two different blocks");
  p = decode();
  p.continuing[0].replaced_blocks = {{.index = 2, .block_id = 50}};  // it holds entries 0 and 1
  expect_invalid(p, "replaced block entry 2");
  p = decode();
  p.continuing[0].replaced_blocks = {{.index = 0, .block_id = -1}};
  expect_invalid(p, "replaced block entry 0");
  EXPECT_EQ(stack_.runner->num_sequences(), 1);
  EXPECT_FALSE(stack_.runner->contains(500));

  // The state is untouched: the real decode continues as the engine does.
  DecodeToEnd({&a});
  EXPECT_EQ(a.output, want[0]);
  // Unknown finished ids are ignored.
  absl::StatusOr<std::vector<StepToken>> got = stack_.runner->Run(StepPlan{.finished = {12345}});
  EXPECT_TRUE(got.ok()) << got.status();
}

TEST_F(StepRunnerTest, KeepLogitsReturnsTheRowEachTokenWasSampledFrom) {
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed_));
  SamplingParams greedy;
  greedy.temperature = 0;
  const std::vector<int32_t> pa = RandomTokens(9), pb = RandomTokens(3), ta{3, 4, 5}, tb{6};
  auto plan = [&] {
    StepPlan p;
    p.new_sequences.push_back(
        {.seq_id = 1, .prompt = pa, .token_ids = pa, .block_ids = ta, .sampling = greedy, .sample = true});
    p.new_sequences.push_back(
        {.seq_id = 2, .prompt = pb, .token_ids = pb, .block_ids = tb, .sampling = greedy, .sample = true});
    p.order = {1, 2};
    return p;
  };
  // Without the option the tokens carry no logits.
  absl::StatusOr<std::vector<StepToken>> plain = stack_.runner->Run(plan());
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->size(), 2u);
  EXPECT_TRUE((*plain)[0].logits.empty());

  // The same step straight through the model, on a cache of its own.
  absl::StatusOr<KvCache> cache =
      KvCache::Allocate(*stack_.backend, stack_.model->kv_cache_shape(kNumBlocks, kBlockSize));
  ASSERT_TRUE(cache.ok()) << cache.status();
  absl::StatusOr<StepBatch> step = StepBatch::Build(std::vector<StepSequence>{{pa, 0, ta}, {pb, 0, tb}}, kBlockSize);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<std::optional<Logits>> want = stack_.model->Forward(step->view(), *cache);
  ASSERT_TRUE(want.ok() && want->has_value()) << want.status();

  StepRunner keeping(*stack_.model, *stack_.cache, /*rank=*/0, StepRunnerOptions{.keep_logits = true});
  absl::StatusOr<std::vector<StepToken>> got = keeping.Run(plan());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    const StepToken& t = (*got)[s];
    EXPECT_EQ(t.seq_id, s + 1);
    ASSERT_EQ(t.logits.size(), static_cast<size_t>(kVocab));
    const std::span<const float> row = (*want)->row(static_cast<int64_t>(s));
    EXPECT_TRUE(std::equal(t.logits.begin(), t.logits.end(), row.begin())) << "sequence " << t.seq_id;
    // Greedy: the token is the row's argmax.
    EXPECT_EQ(t.sampled.token, std::max_element(t.logits.begin(), t.logits.end()) - t.logits.begin());
    EXPECT_EQ(t.sampled.token, (*plain)[s].sampled.token);
  }
}

// The benchmarks' stand-in for a GPU: no forward, a sleep, and the hash token
// of each sampled sequence's position, fed back by decode_sampled as usual.
TEST_F(StepRunnerTest, ASimulatedStepSamplesTheHashTokenOfEachPosition) {
  stack_.MakeRunner(StepRunnerOptions{.simulated_step = absl::Microseconds(200)});
  Seq a{.id = 21, .prompt = RandomTokens(5), .max_tokens = 4};
  Seq b{.id = 22, .prompt = RandomTokens(7), .max_tokens = 4};
  EXPECT_EQ(Step({{&a, 5}, {&b, 7}}), 2u);
  DecodeToEnd({&a, &b});
  for (const Seq* s : {&a, &b}) {
    ASSERT_EQ(s->output.size(), 4u);
    for (size_t k = 0; k < s->output.size(); ++k) {
      EXPECT_EQ(s->output[k], SimulatedToken(s->id, std::ssize(s->prompt) + static_cast<int64_t>(k), kVocab))
          << "sequence " << s->id << ", token " << k;
    }
  }
}

// A decode that names its token (what a plan could always do) and a
// decode_sampled one (the token the runner kept) give the same tokens; a
// decode_sampled step needs a sampled token to decode.
TEST_F(StepRunnerTest, DecodeSampledUsesTheTokenTheRunnerSampled) {
  SCOPED_TRACE("TPSERVE_TEST_SEED=" + std::to_string(seed_));
  SamplingParams greedy;
  greedy.temperature = 0;
  Seq a{.id = 3, .prompt = RandomTokens(9), .sampling = greedy, .max_tokens = 6};
  Seq b{.id = 5, .prompt = RandomTokens(12), .sampling = greedy, .max_tokens = 6};
  const std::vector<std::vector<int32_t>> want = EngineTokens({a, b});
  Step({{&a, 9}, {&b, 4}});  // b's first chunk samples nothing
  StepPlan plan;
  plan.continuing.push_back({.seq_id = b.id, .sample = false, .decode_sampled = true});
  plan.order = {b.id};
  absl::StatusOr<std::vector<StepToken>> got = stack_.runner->Run(plan);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_NE(got.status().message().find("its last step sampled no token"), std::string::npos) << got.status();
  Step({{&a, 1}, {&b, 8}});  // a: decode_sampled
  planner_.decode_sampled = false;
  Step({{&a, 1}, {&b, 1}});  // both name their token
  planner_.decode_sampled = true;
  DecodeToEnd({&a, &b});
  EXPECT_EQ(a.output, want[0]);
  EXPECT_EQ(b.output, want[1]);
}

}  // namespace
}  // namespace tpserve
