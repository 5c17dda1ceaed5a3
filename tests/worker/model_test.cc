// The decoder on one rank (tp = 1, in process): paged attention over cached
// prefixes, mixed prefill + decode batches, and load/step errors.
#include "worker/model.h"

#include <cstring>
#include <fstream>
#include <random>
#include <span>

#include "backend/cpu_backend.h"
#include "backend/step_batch.h"
#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "tests/worker/worker_test_util.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {


// a and b hold the same floats, bit for bit (the CPU backend is batch-invariant:
// docs/architecture.md, "The CPU backend's numerics").
::testing::AssertionResult SameBits(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " values";
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "value " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}
using testing_util::Argmax;
using testing_util::TempDir;

// One sequence's part of a step: `tokens` new tokens from position `start`,
// stored through `blocks`; logits for its last `num_logits` tokens.
struct SeqPart {
  std::vector<int32_t> tokens;
  int32_t start = 0;
  std::vector<int32_t> blocks;
  int32_t num_logits = 1;
};

// The step of `parts` in order (backend/step_batch.h: a part with more than
// one token, and every part before it, is in prefill).
StepBatch MakeStep(const std::vector<SeqPart>& parts, int32_t block_size) {
  std::vector<StepSequence> seqs;
  for (const SeqPart& p : parts) seqs.push_back({p.tokens, p.start, p.blocks, p.num_logits});
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, block_size);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? *std::move(step) : StepBatch();
}

class ModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // Qwen3 (q/k norm), GQA 4/2, odd vocab; Llama with llama3 rope scaling.
    testing_util::MakeModel(dir_->path() / "qwen3",
                            "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 301 --dtype f32 --tie 0 --seed 11");
    testing_util::MakeModel(dir_->path() / "llama",
                            "--arch llama --hidden 96 --intermediate 160 --layers 2 --heads 6 --kv-heads 2 "
                            "--vocab 263 --dtype bf16 --tie 1 --seed 12 --rope-scaling llama3");
  }
  static void TearDownTestSuite() { delete dir_; }

  std::unique_ptr<Model> Load(const std::string& name, ModelOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(dir_->path() / name, *backend_, *comm_, options);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }
  KvCache Cache(const Model& m, int64_t blocks, int32_t block_size) {
    absl::StatusOr<KvCache> c = KvCache::Allocate(*backend_, m.kv_cache_shape(blocks, block_size));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  Logits Run(Model& m, KvCache& cache, const std::vector<SeqPart>& parts) {
    const StepBatch step = MakeStep(parts, cache.block_size());
    absl::StatusOr<std::optional<Logits>> out = m.Forward(step.view(), cache);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok() || !out->has_value()) return Logits{};
    return **out;
  }
  static std::vector<int32_t> RandomTokens(std::mt19937& rng, int n, int vocab) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
  }

  static TempDir* dir_;
  std::unique_ptr<Backend> backend_ = MakeCpuBackend();
  std::unique_ptr<Communicator> comm_ = MakeSoloCommunicator();
};
TempDir* ModelTest::dir_ = nullptr;

std::vector<int32_t> Slice(const std::vector<int32_t>& v, size_t begin, size_t end) {
  return std::vector<int32_t>(v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end));
}

TEST_F(ModelTest, PrefillInTwoChunksMatchesTheWholePrompt) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (const std::string name : {"qwen3", "llama"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> m = Load(name);
    ASSERT_NE(m, nullptr);
    const int32_t bs = 4;
    const std::vector<int32_t> prompt = RandomTokens(rng, 23, 250);
    const std::vector<int32_t> blocks{5, 0, 3, 8, 1, 7};  // scattered on purpose
    KvCache whole_cache = Cache(*m, 9, bs);
    const Logits whole = Run(*m, whole_cache, {{prompt, 0, blocks}});
    for (size_t split : {1u, 8u, 11u, 22u}) {
      KvCache cache = Cache(*m, 9, bs);
      Run(*m, cache, {{Slice(prompt, 0, split), 0, blocks}});
      const Logits second = Run(*m, cache, {{Slice(prompt, split, prompt.size()), static_cast<int32_t>(split), blocks}});
      ASSERT_EQ(second.values.size(), whole.values.size());
      EXPECT_TRUE(SameBits(second.values, whole.values)) << "split " << split;
    }
  }
}

TEST_F(ModelTest, SequenceSharingCachedBlocksInAMixedBatchMatchesFreshComputation) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::unique_ptr<Model> m = Load("qwen3");
  ASSERT_NE(m, nullptr);
  const int32_t bs = 4;
  // A: 20 tokens in blocks {3, 7, 1, 9, 0}. B: A's first 16 tokens + 7 of its own.
  const std::vector<int32_t> a = RandomTokens(rng, 20, 301);
  std::vector<int32_t> b = Slice(a, 0, 16);
  for (int32_t t : RandomTokens(rng, 7, 301)) b.push_back(t);
  const int32_t a_next = 42;
  std::vector<int32_t> a_full = a;
  a_full.push_back(a_next);

  // References, each computed whole in a fresh cache.
  KvCache ref_cache = Cache(*m, 16, bs);
  const Logits b_ref = Run(*m, ref_cache, {{b, 0, {0, 1, 2, 3, 4, 5}}});
  KvCache ref_cache2 = Cache(*m, 16, bs);
  const Logits a_ref = Run(*m, ref_cache2, {{a_full, 0, {0, 1, 2, 3, 4, 5}}});

  KvCache cache = Cache(*m, 16, bs);
  const std::vector<int32_t> a_blocks{3, 7, 1, 9, 0, 12};
  Run(*m, cache, {{a, 0, Slice(a_blocks, 0, 5)}});
  // One step: B prefills only its suffix over A's 4 full blocks, A decodes one token.
  const std::vector<int32_t> b_blocks{3, 7, 1, 9, 14, 6};
  const Logits mixed = Run(*m, cache, {{Slice(b, 16, b.size()), 16, b_blocks}, {{a_next}, 20, a_blocks}});
  ASSERT_EQ(mixed.num_seqs, 2);
  EXPECT_TRUE(SameBits(mixed.row(0), b_ref.row(0)));
  EXPECT_TRUE(SameBits(mixed.row(1), a_ref.row(0)));
  // The shared blocks were not disturbed: A decodes again and still agrees.
  std::vector<int32_t> a_full2 = a_full;
  a_full2.push_back(7);
  KvCache ref_cache3 = Cache(*m, 16, bs);
  const Logits a_ref2 = Run(*m, ref_cache3, {{a_full2, 0, {0, 1, 2, 3, 4, 5}}});
  const Logits a_dec = Run(*m, cache, {{{7}, 21, a_blocks}});
  EXPECT_TRUE(SameBits(a_dec.row(0), a_ref2.row(0)));
}

// Speculative verification (backend/step.h, issue 27): one step carries a
// decoding sequence's last token and k proposed ones at the following
// positions, with a logits row for each. Every row holds the bits of the
// one-token step that would have computed that token, with other sequences
// in the step or not; a rejected token's K/V is never read again (the next
// step's seq_len stops before it, or its slot is written anew).
TEST_F(ModelTest, VerificationRowsEqualOneTokenStepsBitForBit) {
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (const std::string name : {"qwen3", "llama"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> m = Load(name, {.max_num_tokens = 64, .max_num_seqs = 8, .max_position = 0, .max_num_logits_rows = 16});
    ASSERT_NE(m, nullptr);
    const int32_t bs = 4, k = 6;
    const std::vector<int32_t> prompt = RandomTokens(rng, 13, 250), blocks{6, 2, 9, 0, 4, 11};
    // The reference: the prompt, then k + 1 greedy one-token steps.
    KvCache ref_cache = Cache(*m, 12, bs);
    std::vector<int32_t> out{static_cast<int32_t>(Argmax(Run(*m, ref_cache, {{prompt, 0, blocks}}).row(0)))};
    std::vector<Logits> ref;  // ref[i]: the logits after out[i]
    for (int i = 0; i <= k; ++i) {
      ref.push_back(Run(*m, ref_cache, {{{out.back()}, 13 + i, blocks}}));
      out.push_back(static_cast<int32_t>(Argmax(ref.back().row(0))));
    }
    const std::vector<int32_t> other = RandomTokens(rng, 9, 250);
    for (bool alone : {true, false}) {
      SCOPED_TRACE(alone ? "alone" : "beside a prefill and a decode");
      KvCache cache = Cache(*m, 12, bs);
      Run(*m, cache, {{prompt, 0, blocks}});
      std::vector<SeqPart> parts{{Slice(out, 0, k + 1), 13, blocks, k + 1}};
      if (!alone) {
        parts.insert(parts.begin(), SeqPart{other, 0, {1, 3, 5}});
        parts.push_back({{7}, 0, {10}});
      }
      const Logits v = Run(*m, cache, parts);
      const int64_t first = alone ? 0 : 1;
      ASSERT_EQ(v.num_seqs, static_cast<int64_t>(parts.size()) + k);
      for (int i = 0; i <= k; ++i) EXPECT_TRUE(SameBits(v.row(first + i), ref[i].row(0))) << "row " << i;
    }
    // Proposals after out[0] that are wrong from the second on: the first
    // row still holds ref[0]; then the step after the accepted token,
    // whether it decodes (stale K/V beyond seq_len) or verifies again
    // (slots written anew), matches the reference.
    for (bool verify_again : {false, true}) {
      SCOPED_TRACE(verify_again ? "verify again" : "decode after");
      KvCache cache = Cache(*m, 12, bs);
      Run(*m, cache, {{prompt, 0, blocks}});
      const std::vector<int32_t> wrong{out[0], (out[1] + 1) % 250, (out[2] + 7) % 250, 3};
      const Logits v = Run(*m, cache, {{wrong, 13, blocks, 4}});
      EXPECT_TRUE(SameBits(v.row(0), ref[0].row(0)));
      const std::vector<int32_t> next = verify_again ? Slice(out, 1, 5) : Slice(out, 1, 2);
      const Logits w = Run(*m, cache, {{next, 14, blocks, static_cast<int32_t>(next.size())}});
      for (size_t i = 0; i < next.size(); ++i) EXPECT_TRUE(SameBits(w.row(static_cast<int64_t>(i)), ref[i + 1].row(0)));
    }
  }
}

TEST_F(ModelTest, IntermediatesAreNamedPerLayer) {
  std::unique_ptr<Model> m = Load("qwen3");
  ASSERT_NE(m, nullptr);
  std::vector<std::string> seen;
  m->set_intermediate_hook([&](std::string_view name, int layer, const Tensor& t) {
    seen.push_back(std::string(name) + "@" + std::to_string(layer) + t.ShapeString());
  });
  KvCache cache = Cache(*m, 4, 4);
  Run(*m, cache, {{{1, 2, 3}, 0, {2}}});
  EXPECT_EQ(seen.size(), 1 + 2 * 9 + 2u);  // embed, 9 per layer, final_norm, last_hidden
  EXPECT_EQ(seen.front(), "embed@-1[3, 64]");
  EXPECT_NE(std::find(seen.begin(), seen.end(), "qkv@1[3, 256]"), seen.end());  // (4 + 2*2) * 32
  EXPECT_EQ(seen.back(), "last_hidden@-1[1, 64]");
}

TEST_F(ModelTest, BadStepsAreInvalidArgument) {
  ModelOptions options;
  options.max_num_tokens = 8;
  options.max_num_seqs = 2;
  std::unique_ptr<Model> m = Load("qwen3", options);
  ASSERT_NE(m, nullptr);
  KvCache cache = Cache(*m, 4, 4);
  auto forward = [&](const std::vector<SeqPart>& parts) {
    const StepBatch step = MakeStep(parts, 4);
    return m->Forward(step.view(), cache).status();
  };
  EXPECT_EQ(forward({{std::vector<int32_t>(9, 1), 0, {0, 1, 2}}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(forward({{{1}, 0, {0}}, {{1}, 0, {1}}, {{1}, 0, {2}}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(forward({{{1, 2}, 0, {4}}}).code(), absl::StatusCode::kInvalidArgument);  // block 4 of 4
  const absl::Status rows = forward({{{1, 2, 3}, 0, {0}, 3}});  // 3 logits rows, 2 allowed (max_num_seqs)
  EXPECT_EQ(rows.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rows.message().find("max_num_logits_rows"), std::string::npos) << rows;
  absl::StatusOr<KvCache> other = KvCache::Allocate(*backend_, KvCacheShape{3, 4, 4, 2, 32});
  ASSERT_TRUE(other.ok());
  const StepBatch step = MakeStep({{{1, 2}, 0, {0}}}, 4);
  const absl::Status s = m->Forward(step.view(), *other).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("kv_cache_shape"), std::string::npos) << s;
}

}  // namespace
}  // namespace tpserve
