// Speculative decoding keeps the sampled output distribution (issue 27,
// Tests): the same requests generated through the real StepRunner with
// proposals verified (SampleVerified) and one token per step, each from its
// own seed, give the same distribution of outputs, by a two-sample
// chi-square test whose threshold is the chi-square quantile at a stated
// false-alarm probability (tests/testing/chi_square.h). Cases: temperature,
// top-p, and the three penalties (which see the accepted proposals as output).
//
// The model is small in effect: allowed_token_ids limits the tiny random
// model's 301 tokens to 5, so a sample (4 tokens) falls in one of 625 cells.
// The proposals are deterministic (the rule's premise): the greedy
// continuation of the prompt (penalties applied), position by position, so
// some are kept and some are not at every position (asserted). The two arms
// use disjoint seeds: with one seed both paths give the same tokens (one draw
// per token; speculative_step_runner_test checks that bit for bit), so only
// disjoint seeds test the rule's distribution, which must hold for any rule,
// one that draws differently included.
//
// It fails a wrong rule (shown by hand with SampleVerified changed, 20,000
// samples an arm): a rejection drawing the correction from the whole row,
// not the row without the proposal, gives statistics of 7,061 / 5,869 /
// 7,678 against limits of 276 / 79 / 470; a rule that also keeps a rejected
// proposal 5% of the time fails the penalties case (744 against 467) and
// passes the other two (300 against 328, 60 against 79): differences that
// small are near this sample size's reach.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backend/cpu_backend.h"
#include "base/sanitizers.h"
#include "gtest/gtest.h"
#include "tests/testing/chi_square.h"
#include "tests/testing/seed.h"
#include "tests/testing/step_runner_fixture.h"
#include "tests/worker/worker_test_util.h"
#include "worker/step_runner.h"

namespace tpserve {
namespace {

using testing_util::TempDir;

constexpr int32_t kBlockSize = 4;
constexpr int64_t kNumBlocks = 128;
constexpr int64_t kBatch = 8;      // sequences generated side by side (independent: each its own seed)
constexpr int64_t kLength = 4;     // tokens of a sample: the prefill's, then up to 1 + kDrafts a step
constexpr int64_t kDrafts = 3;     // proposals per step, as many as still fit in kLength
// Per arm (a multiple of kBatch). Under ASan a quarter: that run checks memory
// and UB on the same paths; the plain build's 20000 give the test its power.
constexpr int64_t kSamples = kAddressSanitizer ? 5000 : 20000;
// The chance that a correct rule fails a case with random seeds; with the
// fixed seeds every run draws the same samples and gives the same verdict.
constexpr double kFalseAlarm = 1e-6;

const std::vector<int32_t> kAllowed = {7, 31, 64, 130, 255};  // sorted, unique
const std::vector<int32_t> kPrompt = {31, 12, 7, 200, 64, 31, 9};

// Rank 0's proposer here: the fixed proposals at the positions after what it
// was fed (the prompt, then each token sampled), up to kDrafts and kLength.
class FixedProposer final : public speculative::Proposer {
 public:
  explicit FixedProposer(const std::vector<int32_t>* const* drafts) : drafts_(drafts) {}
  void Append(std::span<const int32_t> tokens) override { fed_ += std::ssize(tokens); }
  int32_t Propose(std::span<int32_t> out) override {
    const int64_t have = fed_ - std::ssize(kPrompt);  // output tokens so far
    const std::vector<int32_t>* drafts = *drafts_;
    if (drafts == nullptr) return 0;
    const int64_t n = std::clamp<int64_t>(std::min<int64_t>(kDrafts, kLength - have), 0, std::ssize(out));
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = (*drafts)[static_cast<size_t>(have + i)];
    return static_cast<int32_t>(n);
  }

 private:
  const std::vector<int32_t>* const* drafts_;  // the test's proposals of the arm being generated
  int64_t fed_ = 0;
};

struct Arm {
  std::vector<int64_t> cells;        // [5^kLength] samples per output
  std::vector<int64_t> kept_at;      // [kDrafts] proposals kept at each position of a step's run
  int64_t proposed = 0;
};

class SpeculativeDistributionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing_util::MakeModel(dir_->path() / "m",
                            "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 "
                            "--head-dim 32 --vocab 301 --dtype f32 --tie 0 --seed 41");
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    stack_.backend = MakeCpuBackend();
    ModelOptions options;
    options.max_num_tokens = 128;
    options.max_num_seqs = kBatch;
    options.max_num_logits_rows = kBatch * (1 + kDrafts);
    const absl::Status loaded = stack_.Load(dir_->path() / "m", options, kNumBlocks, kBlockSize);
    ASSERT_TRUE(loaded.ok()) << loaded;
    StepRunnerOptions o;
    o.proposers = {.method = "ngram", .num_speculative_tokens = kDrafts};
    o.make_proposer = [this](uint64_t) { return std::make_unique<FixedProposer>(&drafts_); };
    stack_.MakeRunner(std::move(o));
    controls_ = std::make_shared<TokenControls>();
    controls_->allowed_token_ids = kAllowed;
  }

  struct Live {
    testing_util::PlannedSequence seq;  // its id, blocks and positions in the cache
    std::vector<int32_t> tokens;        // generated
    bool decoding = false;              // past its prefill
  };

  // Generates kLength tokens (or one more: a step's last) from kPrompt for each
  // of `seeds` (at most kBatch), side by side. With `drafts`, they speculate:
  // after each step rank 0 proposes the tokens of `drafts` at the positions
  // that follow (FixedProposer), up to kDrafts, none past kLength, and the
  // next step has that many draft slots.
  std::vector<std::vector<int32_t>> Generate(const SamplingParams& sampling, std::span<const uint64_t> seeds,
                                             const std::vector<int32_t>* drafts, Arm* arm) {
    drafts_ = drafts;
    std::vector<Live> live(seeds.size());
    StepPlan plan;
    plan.finished.swap(done_);
    for (size_t i = 0; i < seeds.size(); ++i) {
      live[i].seq.id = next_id_++;
      SamplingParams p = sampling;
      p.seed = seeds[i];
      p.controls = controls_;
      plan.new_sequences.push_back(live[i].seq.Prefill(pool_, kPrompt, p, /*speculate=*/drafts != nullptr,
                                                       drafts != nullptr ? int32_t{kDrafts} : 0));
      plan.order.push_back(live[i].seq.id);
    }
    for (;;) {
      absl::StatusOr<std::vector<StepToken>> got = stack_.runner->Run(plan);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) return {};
      // The step's tokens, each sequence's consecutive, in the plan's order.
      size_t next = 0;
      for (uint64_t id : plan.order) {
        Live& s = *std::find_if(live.begin(), live.end(), [&](const Live& l) { return l.seq.id == id; });
        const size_t first = next;
        if (arm != nullptr && next < got->size() && (*got)[next].seq_id == id) arm->proposed += (*got)[next].num_proposed;
        while (next < got->size() && (*got)[next].seq_id == id) s.tokens.push_back((*got)[next++].sampled.token);
        const int64_t accepted = static_cast<int64_t>(next - first) - 1;
        if (arm != nullptr && accepted > 0) {
          for (int64_t a = 0; a < accepted; ++a) ++arm->kept_at[static_cast<size_t>(a)];
        }
        // A decode computed its input token and the proposals kept; the blocks past them go back.
        s.seq.Computed(pool_, s.decoding ? accepted + 1 : 0);
      }
      plan = StepPlan{};
      for (Live& s : live) {
        if (s.seq.table.empty()) continue;  // done before
        if (std::ssize(s.tokens) >= kLength) {
          plan.finished.push_back(s.seq.id);
          pool_.Release(s.seq.table);
          continue;
        }
        int32_t slots = 0, ask = 0;
        if (drafts != nullptr) {  // as many slots as rank 0 proposed: kDrafts, none past kLength
          slots = static_cast<int32_t>(std::min<int64_t>(kDrafts, kLength - std::ssize(s.tokens)));
          ask = static_cast<int32_t>(kDrafts);
          EXPECT_EQ(std::ssize(stack_.runner->drafts(s.seq.id)), slots);
        }
        plan.continuing.push_back(s.seq.Decode(pool_, slots, ask));
        s.decoding = true;
      }
      if (plan.continuing.empty()) break;
      // Multi-token sequences (those verifying proposals) first, as the scheduler orders them.
      for (bool with_drafts : {true, false}) {
        for (const ContinuingSequencePlan& c : plan.continuing) {
          if (stack_.runner->drafts(c.seq_id).empty() != with_drafts) plan.order.push_back(c.seq_id);
        }
      }
    }
    done_ = std::move(plan.finished);
    std::vector<std::vector<int32_t>> out;
    for (Live& s : live) out.push_back(std::move(s.tokens));
    return out;
  }

  // kSamples samples from seeds first_seed, first_seed + 1, ...: the count of
  // each output (a cell per sequence of kLength allowed tokens).
  Arm Sample(const SamplingParams& sampling, uint64_t first_seed, const std::vector<int32_t>* drafts) {
    Arm arm;
    int64_t cells = 1;
    for (int64_t i = 0; i < kLength; ++i) cells *= std::ssize(kAllowed);
    arm.cells.assign(static_cast<size_t>(cells), 0);
    arm.kept_at.assign(kDrafts, 0);
    std::vector<uint64_t> seeds(kBatch);
    for (int64_t n = 0; n < kSamples; n += kBatch) {
      for (int64_t i = 0; i < kBatch; ++i) seeds[static_cast<size_t>(i)] = first_seed + static_cast<uint64_t>(n + i);
      for (const std::vector<int32_t>& out : Generate(sampling, seeds, drafts, &arm)) {
        EXPECT_GE(std::ssize(out), kLength);
        int64_t cell = 0;
        for (int64_t i = 0; i < kLength && i < std::ssize(out); ++i) {
          cell = cell * std::ssize(kAllowed) + AllowedIndex(out[static_cast<size_t>(i)]);
        }
        ++arm.cells[static_cast<size_t>(cell)];
      }
      if (::testing::Test::HasFailure()) break;
    }
    return arm;
  }

  // Where `token` is in kAllowed.
  static int64_t AllowedIndex(int32_t token) {
    const auto it = std::lower_bound(kAllowed.begin(), kAllowed.end(), token);
    EXPECT_TRUE(it != kAllowed.end() && *it == token) << token << " is not an allowed token";
    return it - kAllowed.begin();
  }

  // The two arms, speculative and not, from disjoint seeds: the same
  // distribution by the chi-square test at kFalseAlarm, and proposals kept at
  // every position of a step (so the verification did choose tokens).
  void ExpectSameDistribution(const SamplingParams& sampling) {
    const uint64_t seed = testing_util::TestSeed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    SamplingParams greedy = sampling;  // the penalties too: proposals that are often right
    greedy.temperature = 0;
    const std::vector<uint64_t> one = {0};
    const std::vector<int32_t> drafts = Generate(greedy, one, nullptr, nullptr).at(0);
    const uint64_t first = seed << 20;  // seed < 2^32: the arms' 2 kSamples seeds never meet another seed's
    const Arm spec = Sample(sampling, first, &drafts);
    const Arm plain = Sample(sampling, first + kSamples, nullptr);
    const testing_util::Homogeneity h = testing_util::TwoSampleChiSquare(spec.cells, plain.cells);
    const double limit = testing_util::ChiSquareThreshold(h.dof, kFalseAlarm);
    int64_t kept = 0;
    for (int64_t k : spec.kept_at) kept += k;
    std::cerr << "chi-square " << h.statistic << " over " << h.cells << " cells (limit " << limit
              << " at false alarm " << kFalseAlarm << "); proposals kept " << kept << " of " << spec.proposed
              << ", by position:";
    for (int64_t k : spec.kept_at) std::cerr << " " << k;
    std::cerr << "\n";
    EXPECT_LT(h.statistic, limit) << "the speculative outputs' distribution differs (dof " << h.dof << ")";
    for (size_t a = 0; a < spec.kept_at.size(); ++a) EXPECT_GE(spec.kept_at[a], kSamples / 50) << "position " << a;
    EXPECT_LT(kept, spec.proposed);
  }

  static TempDir* dir_;
  testing_util::StepRunnerStack stack_;
  std::shared_ptr<TokenControls> controls_;
  testing_util::BlockPool pool_{kNumBlocks, kBlockSize};
  std::vector<uint64_t> done_;  // generated, to be dropped by the next plan
  const std::vector<int32_t>* drafts_ = nullptr;  // the proposals of the arm being generated (FixedProposer)
  uint64_t next_id_ = 1;
};

TempDir* SpeculativeDistributionTest::dir_ = nullptr;

TEST_F(SpeculativeDistributionTest, Temperature) {
  SamplingParams p;
  p.temperature = 0.8f;
  ExpectSameDistribution(p);
}

TEST_F(SpeculativeDistributionTest, TopP) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.75f;
  ExpectSameDistribution(p);
}

TEST_F(SpeculativeDistributionTest, Penalties) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.repetition_penalty = 1.4f;
  p.frequency_penalty = 0.7f;
  p.presence_penalty = 0.5f;
  ExpectSameDistribution(p);
}

}  // namespace
}  // namespace tpserve
