// StepRunner with rank 0's proposals (speculative decoding, worker/step_runner.h):
// a sequence that verifies proposals (some right, some wrong: a scripted
// proposer, StepRunnerOptions::make_proposer) gets the tokens and log-probs of
// the same sequence decoded one token per step, bit for bit (the CPU backend:
// every verification row has the bits of the one-token step), greedy and
// seeded sampling alike; the proposer is fed exactly the sequence's prompt
// and every token sampled for it; after each step the runner keeps only the
// accepted positions and their blocks (all the draft slots' blocks beyond
// them go back, proposals or not), so the next step, planned on exactly that,
// goes on right. Draft slots without decode_sampled are refused, and so are
// more proposals than Load's k. With the real n-gram method, rank 0's
// proposals are those of an n-gram proposer fed the same tokens.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <utility>

#include "backend/cpu_backend.h"
#include "gtest/gtest.h"
#include "tests/testing/seed.h"
#include "tests/testing/step_runner_fixture.h"
#include "tests/worker/worker_test_util.h"
#include "worker/step_runner.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

// Rank 0's proposer in these tests: records what it is fed, and proposes the
// oracle's next tokens after them (each wrong with probability 0.3, and the
// last of every third proposal for sure) when the test set an oracle.
struct Script {
  const std::vector<int32_t>* oracle = nullptr;  // the sequence's output to come
  int64_t prompt = 0;                            // its prompt's length
  std::mt19937_64* rng = nullptr;
  std::vector<int32_t> fed;                      // every token appended
  int64_t proposals = 0;                         // Propose calls
};

class ScriptedProposer final : public speculative::Proposer {
 public:
  explicit ScriptedProposer(Script* script) : script_(script) {}
  void Append(std::span<const int32_t> tokens) override {
    script_->fed.insert(script_->fed.end(), tokens.begin(), tokens.end());
  }
  int32_t Propose(std::span<int32_t> out) override {
    const Script& s = *script_;
    if (s.oracle == nullptr) return 0;
    const int64_t at = std::ssize(s.fed) - s.prompt;  // output tokens known
    const int64_t n = std::min<int64_t>({std::ssize(out), 1 + static_cast<int64_t>((*s.rng)() % 4),
                                         std::ssize(*s.oracle) - at});
    for (int64_t i = 0; i < n; ++i) {
      int32_t t = (*s.oracle)[static_cast<size_t>(at + i)];
      if (std::bernoulli_distribution(0.3)(*s.rng) || (script_->proposals % 3 == 2 && i + 1 == n)) t = (t + 1) % 301;
      out[static_cast<size_t>(i)] = t;
    }
    ++script_->proposals;
    return static_cast<int32_t>(std::max<int64_t>(n, 0));
  }

 private:
  Script* script_;
};

constexpr int32_t kVocab = 301;
constexpr int32_t kBlockSize = 4;
constexpr int64_t kNumBlocks = 97;
constexpr int32_t kK = 4;  // Load's num_speculative_tokens

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
    stack_.backend = MakeCpuBackend();
    ModelOptions options;
    options.max_num_tokens = 64;
    options.max_num_seqs = 8;
    options.max_num_logits_rows = 8 + 16;
    const absl::Status loaded = stack_.Load(dir_->path() / "m", options, kNumBlocks, kBlockSize);
    ASSERT_TRUE(loaded.ok()) << loaded;
    StepRunnerOptions o;
    o.proposers = {.method = "ngram", .num_speculative_tokens = kK};
    o.make_proposer = [this](uint64_t) { return std::make_unique<ScriptedProposer>(&script_); };
    stack_.MakeRunner(std::move(o));
  }

  // Generates `n` tokens for sequence `id`; with `oracle`, it speculates: each
  // step asks rank 0 for up to kK proposals (the scripted proposer makes up
  // to 4 of the oracle's, some wrong) and gives the next step 1 to kK draft
  // slots, and what each step returns is checked against the proposals.
  Generated Generate(uint64_t id, const std::vector<int32_t>& prompt, const SamplingParams& sampling, int64_t n,
                     const std::vector<int32_t>* oracle, std::mt19937_64& rng) {
    Generated g;
    script_ = Script{.oracle = oracle, .prompt = std::ssize(prompt), .rng = &rng};
    const auto ask = [&] {  // proposals for the next step, never past n
      return oracle == nullptr ? 0 : static_cast<int32_t>(std::clamp<int64_t>(n - std::ssize(g.tokens) - 2, 0, kK));
    };
    testing_util::PlannedSequence seq{.id = id};
    StepPlan first;
    first.finished.swap(done_);  // the sequences generated before: their blocks are free again
    first.new_sequences.push_back(seq.Prefill(pool_, prompt, sampling, /*speculate=*/oracle != nullptr, ask()));
    first.order = {id};
    absl::StatusOr<std::vector<StepToken>> got = stack_.runner->Run(first);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return g;
    auto keep = [&](const StepToken& t) {
      g.tokens.push_back(t.sampled.token);
      g.logprobs.push_back(t.sampled.logprob);
    };
    keep((*got)[0]);
    int32_t asked = first.new_sequences[0].num_proposals;  // what the last step asked for this one
    while (std::ssize(g.tokens) < n) {
      // Slots: what was asked, or one fewer (a step may hold fewer than rank 0 made).
      const int32_t slots = std::min<int32_t>(asked, static_cast<int32_t>(n - std::ssize(g.tokens) - 1)) -
                            (asked > 1 && rng() % 4 == 0 ? 1 : 0);
      const ContinuingSequencePlan c = seq.Decode(pool_, std::max(slots, 0), ask());
      const std::vector<int32_t> drafts = stack_.runner->drafts(id);
      const size_t k = std::min(drafts.size(), static_cast<size_t>(c.num_draft_slots));
      StepPlan plan;
      plan.continuing.push_back(c);
      plan.order = {id};
      got = stack_.runner->Run(plan);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) return g;
      EXPECT_GE(got->size(), 1u);
      EXPECT_LE(got->size(), k + 1);
      EXPECT_EQ(got->front().num_proposed, static_cast<int32_t>(k)) << "the proposals it verified";
      // Kept: the proposals equal to the token sampled before them, then one more.
      for (size_t i = 0; i + 1 < got->size(); ++i) EXPECT_EQ((*got)[i].sampled.token, drafts[i]);
      if (got->size() <= k) {
        EXPECT_NE(got->back().sampled.token, drafts[got->size() - 1]);
      }
      asked = c.num_proposals;
      g.proposed += static_cast<int64_t>(k);
      g.accepted += std::ssize(*got) - 1;
      for (const StepToken& t : *got) keep(t);
      seq.Computed(pool_, std::ssize(*got));  // the accepted positions; the blocks past them go back
    }
    if (oracle != nullptr) {  // rank 0's proposer was fed the prompt and every token sampled, in order
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), g.tokens.begin(), g.tokens.end());
      EXPECT_EQ(script_.fed, all);
      EXPECT_GT(script_.proposals, 0);
    }
    done_.push_back(id);
    pool_.Release(seq.table);
    return g;
  }

  static TempDir* dir_;
  testing_util::StepRunnerStack stack_;
  testing_util::BlockPool pool_{kNumBlocks, kBlockSize};
  std::vector<uint64_t> done_;  // generated, to be dropped by the next plan
  Script script_;               // the proposer of the sequence being generated
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

// The real proposers on rank 0: after every step the proposals held for the
// next are those of an n-gram proposer of its own fed the prompt and every
// token sampled so far (the runner verifies them: they change no token).
TEST_F(SpeculativeStepRunnerTest, RankZeroProposesWhatTheProposerMakesFromTheSameTokens) {
  StepRunnerOptions o;
  o.proposers = {.method = "ngram", .num_speculative_tokens = kK, .prompt_lookup_min = 1, .prompt_lookup_max = 3};
  StepRunner runner(*stack_.model, *stack_.cache, /*rank=*/0, std::move(o));
  const std::vector<int32_t> prompt = {7, 8, 9, 10, 7, 8, 9, 11, 7, 8};
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> table;
  StepPlan first;
  first.new_sequences.push_back(NewSequencePlan{.seq_id = 3, .prompt = prompt, .token_ids = prompt,
                                                .block_ids = pool_.Grow(table, std::ssize(prompt)),
                                                .sampling = greedy, .sample = true, .speculate = true,
                                                .num_proposals = kK});
  first.order = {3};
  absl::StatusOr<speculative::NgramProposer> alone = speculative::NgramProposer::Create(
      {.prompt_lookup_min = 1, .prompt_lookup_max = 3, .num_speculative_tokens = kK});
  ASSERT_TRUE(alone.ok());
  alone->Append(prompt);
  absl::StatusOr<std::vector<StepToken>> got = runner.Run(first);
  ASSERT_TRUE(got.ok()) << got.status();
  int64_t computed = std::ssize(prompt), proposed = 0;
  for (int step = 0; step < 12; ++step) {
    for (const StepToken& t : *got) alone->Append(t.sampled.token);
    std::vector<int32_t> want(kK, -1);
    want.resize(static_cast<size_t>(alone->Propose(want)));
    ASSERT_EQ(runner.drafts(3), want) << "step " << step;
    proposed += std::ssize(want);
    StepPlan plan;
    const int64_t keep = std::ssize(table);  // cut to the blocks of its computed positions (below)
    plan.continuing.push_back(ContinuingSequencePlan{.seq_id = 3, .keep_blocks = keep,
                                                     .new_block_ids = pool_.Grow(table, computed + 1 + kK),
                                                     .sample = true, .decode_sampled = true,
                                                     .num_draft_slots = kK, .num_proposals = kK});
    plan.order = {3};
    got = runner.Run(plan);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->front().num_proposed, std::ssize(want));
    computed += std::ssize(*got);
    pool_.Trim(table, computed);
  }
  EXPECT_GT(proposed, 0) << "the prompt repeats: the n-gram proposer matched";
}

TEST_F(SpeculativeStepRunnerTest, DraftsWithoutDecodeSampledAreRefused) {
  std::vector<int32_t> table;
  StepPlan first;
  first.new_sequences.push_back(NewSequencePlan{.seq_id = 1, .prompt = {5, 6, 7}, .token_ids = {5, 6, 7},
                                                .block_ids = pool_.Grow(table, 3), .sample = true});
  first.order = {1};
  absl::StatusOr<std::vector<StepToken>> got = stack_.runner->Run(first);
  ASSERT_TRUE(got.ok()) << got.status();
  StepPlan bad;
  bad.continuing.push_back(ContinuingSequencePlan{.seq_id = 1, .new_block_ids = pool_.Grow(table, 6),
                                                  .token_ids = {(*got)[0].sampled.token}, .sample = true,
                                                  .num_draft_slots = 2});
  bad.order = {1};
  const absl::StatusOr<std::vector<StepToken>> refused = stack_.runner->Run(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("num_draft_slots"), std::string::npos) << refused.status();
  bad.continuing[0].token_ids.clear();
  bad.continuing[0].decode_sampled = true;
  bad.continuing[0].num_proposals = kK + 1;
  const absl::StatusOr<std::vector<StepToken>> too_many = stack_.runner->Run(bad);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("num_speculative_tokens"), std::string::npos) << too_many.status();
  // Nothing changed: the same step asking at most k runs.
  bad.continuing[0].num_proposals = kK;
  EXPECT_TRUE(stack_.runner->Run(bad).ok());
}

}  // namespace
}  // namespace tpserve
