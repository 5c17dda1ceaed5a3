// Verification steps as CUDA graphs (worker/decode_graphs.h, issue 27 item 2)
// never change a token: two StepRunners over the CUDA backend, one with its
// decode and verification graphs captured at WarmUp, one with enforce_eager,
// are given the same plans (a sequence generated one token per step, then
// again with up to 4 proposals a step from that output, each wrong with
// probability 0.3), greedy and seeded, and must return the same tokens and
// log-probs, every bit, step for step, and every logits row a verification
// step sampled from (keep_logits) the same bits; the graphs must have replayed the
// verification steps (one sequence, k = 1..4). Then batches of 2 to 8
// sequences generated together the same way, each sequence with its own k a
// step (up to kBatchProposals), greedy and seeded ones side by side: every
// step whose last sequence verifies replays its (S, T) graph, the others (a
// one-token sequence last) run eagerly, all with the eager runner's bits. (That a verification gives
// the one-token steps' tokens is the CPU backend's exact property,
// tests/worker/speculative_step_runner_test.cc; in bf16 on the CUDA backend
// a verification row follows the one-token step's to rounding, so it is not
// asserted here.) Rank 0 has the device sampler, as served: decode steps sample
// on the device, verification steps on the host. The fast and the reference
// kernel set, and deterministic mode. tp 1 only: at tp 2 the emulated ranks talk over gloo, which
// cannot capture, so both runners would be eager. Skips without a GPU; the
// emulated run (label cuda-emu) takes fewer tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "comm/communicator.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#include "scheduler/block_manager.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_model.h"
#include "tests/cuda/test_sizes.h"
#include "tests/testing/seed.h"
#include "worker/step_runner.h"

namespace tpserve {
namespace {

constexpr int32_t kVocab = 263;
constexpr int32_t kBlockSize = 4;
constexpr int64_t kNumBlocks = 160;
constexpr int kProposals = 4;  // the most a step proposes, and the verification graphs' k
constexpr int64_t kTokens = cuda_test::kEmulated ? 24 : 64;
constexpr int64_t kBatchTokens = cuda_test::kEmulated ? 8 : 32;  // per sequence of a batch
constexpr int32_t kMaxBatch = 8;  // the verification graphs' most sequences (kMaxVerifyGraphSeqs)
// The batches' k, and the verification graphs' K for them: 4 on a GPU (144
// graphs, as served at the default k); 2 emulated (72 graphs, with at most
// 3 rows a sequence), where k = 4 and 12 tokens a sequence made the batch
// test about 100 s over the three kernel sets (load 3; 26 s of it capturing
// the 144 graphs), against 41 s now (load 1.4).
constexpr int kBatchProposals = cuda_test::kEmulated ? 2 : kProposals;

// The proposals of the sequence being generated: its plain run's output, 1 to
// max_k of the tokens after what rank 0 was fed, each wrong with
// probability 0.3 by a hash of its position (so both runners' proposers,
// fed the same tokens, propose the same).
struct Oracle {
  const std::vector<int32_t>* tokens = nullptr;  // null: no proposals
  int64_t prompt = 0;
  uint64_t seed = 0;
  int64_t length = kTokens;  // tokens the sequence generates: no proposal past them
  int64_t max_k = kProposals;  // the most it proposes a step
  bool may_skip = false;       // after its first step, 0 to max_k (none one time in max_k + 1)
};

class OracleProposer final : public speculative::Proposer {
 public:
  explicit OracleProposer(const Oracle* oracle) : oracle_(oracle) {}
  void Append(std::span<const int32_t> tokens) override { fed_ += std::ssize(tokens); }
  int32_t Propose(std::span<int32_t> out) override {
    if (oracle_->tokens == nullptr) return 0;
    const int64_t have = fed_ - oracle_->prompt;
    const uint64_t h = SplitMix64(oracle_->seed ^ static_cast<uint64_t>(have));
    const int64_t k = oracle_->may_skip && have > 1 ? static_cast<int64_t>(h % (oracle_->max_k + 1))
                                                    : 1 + static_cast<int64_t>(h % oracle_->max_k);
    const int64_t n = std::clamp<int64_t>(std::min<int64_t>(k, oracle_->length - have - 1), 0, std::ssize(out));
    for (int64_t i = 0; i < n; ++i) {
      int32_t t = (*oracle_->tokens)[static_cast<size_t>(have + i)];
      if (SplitMix64(h + static_cast<uint64_t>(i)) % 10 < 3) t = (t + 1) % kVocab;
      out[static_cast<size_t>(i)] = t;
    }
    return static_cast<int32_t>(n);
  }

 private:
  const Oracle* oracle_;
  int64_t fed_ = 0;
};

// A backend configuration the test runs under.
struct Config {
  const char* name;
  cuda::KernelSet kernels;
  bool deterministic;
};
void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

// One rank-0 StepRunner over its own CUDA backend, model, cache and sampler.
struct Runner {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm = MakeSoloCommunicator();
  std::unique_ptr<cuda::CudaSampler> sampler;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<StepRunner> runner;

  // max_seqs sequences a step, each with up to `proposals` proposals (the
  // coordinator's k) and extra_rows proposals a step in all (the workers'
  // Load.max_num_draft_tokens).
  static std::unique_ptr<Runner> Make(const std::filesystem::path& dir, const Config& config, bool eager,
                                      std::map<uint64_t, Oracle>* oracles, int32_t max_seqs, int32_t proposals,
                                      int32_t extra_rows) {
    auto r = std::make_unique<Runner>();
    CudaBackendOptions bo;
    bo.kernels = config.kernels;
    bo.deterministic = config.deterministic;
    r->backend = MakeCudaBackend(0, bo);
    cuda::CudaSampler::Options so;
    so.max_seqs = max_seqs;
    so.vocab_size = kVocab;
    so.max_logprobs = 2;
    // As rank/ makes it: deterministic mode samples one block per row.
    so.kernels = config.deterministic ? cuda::KernelSet::kReference : config.kernels;
    absl::StatusOr<std::unique_ptr<cuda::CudaSampler>> sampler =
        cuda::CudaSampler::Create(so, static_cast<cudaStream_t>(r->backend->stream()));
    EXPECT_TRUE(sampler.ok()) << sampler.status();
    if (!sampler.ok()) return nullptr;
    r->sampler = *std::move(sampler);
    ModelOptions mo;
    mo.max_num_tokens = 64;
    mo.max_num_seqs = max_seqs;
    mo.max_position = 128;
    mo.max_num_logits_rows = mo.max_num_seqs + extra_rows;
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir, *r->backend, *r->comm, mo);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return nullptr;
    r->model = *std::move(model);
    absl::StatusOr<KvCache> cache = KvCache::Allocate(*r->backend, r->model->kv_cache_shape(kNumBlocks, kBlockSize));
    EXPECT_TRUE(cache.ok()) << cache.status();
    if (!cache.ok()) return nullptr;
    r->cache = std::make_unique<KvCache>(*std::move(cache));
    StepRunnerOptions ro;
    ro.enforce_eager = eager;
    ro.sampler = r->sampler.get();
    ro.keep_logits = true;  // the host-sampled (verification) rows come back
    ro.num_speculative_tokens = proposals;
    ro.proposers = {.method = "ngram", .num_speculative_tokens = proposals};
    ro.make_proposer = [oracles](uint64_t id) { return std::make_unique<OracleProposer>(&(*oracles)[id]); };
    r->runner = std::make_unique<StepRunner>(*r->model, *r->cache, /*rank=*/0, ro);
    const absl::Status warm = r->runner->WarmUp();
    EXPECT_TRUE(warm.ok()) << warm;
    return warm.ok() ? std::move(r) : nullptr;
  }
};

// The two runners, planned together: the same plan to each, the same result
// expected from each.
class SpeculativeGraphTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
    dir_ = cuda_test::MakeTestModel("tpserve_speculative_graph", "qwen3",
                                    "--arch qwen3 --hidden 64 --intermediate 96 --layers 2 --heads 2 --kv-heads 1 "
                                    "--head-dim 64 --vocab 263 --dtype bf16 --tie 0 --seed 47 --max-pos 128");
    for (int32_t b = 0; b < kNumBlocks; ++b) free_.push_back(b);
  }
  // The two runners (see Runner::Make).
  void MakeRunners(int32_t max_seqs, int32_t proposals, int32_t extra_rows) {
    graphs_ = Runner::Make(dir_, GetParam(), /*eager=*/false, &oracles_, max_seqs, proposals, extra_rows);
    eager_ = Runner::Make(dir_, GetParam(), /*eager=*/true, &oracles_, max_seqs, proposals, extra_rows);
    ASSERT_NE(graphs_, nullptr);
    ASSERT_NE(eager_, nullptr);
    ASSERT_TRUE(graphs_->runner->uses_graphs());
    ASSERT_FALSE(eager_->runner->uses_graphs());
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Runs `plan` on both runners; their tokens, which must agree bit for bit.
  // eager_only: on the eager runner alone (its tokens).
  std::vector<StepToken> Run(const StepPlan& plan, bool eager_only = false) {
    absl::StatusOr<std::vector<StepToken>> e = eager_->runner->Run(plan);
    EXPECT_TRUE(e.ok()) << e.status();
    if (eager_only) return e.ok() ? *std::move(e) : std::vector<StepToken>();
    absl::StatusOr<std::vector<StepToken>> g = graphs_->runner->Run(plan);
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok() || !e.ok()) return {};
    EXPECT_EQ(g->size(), e->size());
    for (size_t i = 0; i < std::min(g->size(), e->size()); ++i) {
      EXPECT_EQ((*g)[i].sampled.token, (*e)[i].sampled.token) << "token " << i;
      EXPECT_EQ(0, std::memcmp(&(*g)[i].sampled.logprob, &(*e)[i].sampled.logprob, sizeof(float)))
          << "token " << i << ": log-prob " << (*g)[i].sampled.logprob << " against " << (*e)[i].sampled.logprob;
      const std::vector<float>& gl = (*g)[i].logits;
      const std::vector<float>& el = (*e)[i].logits;
      EXPECT_TRUE(gl.size() == el.size() && std::memcmp(gl.data(), el.data(), gl.size() * sizeof(float)) == 0)
          << "token " << i << ": the logits row it was sampled from differs in its bits";
      logits_rows_ += gl.empty() ? 0 : 1;
    }
    return *e;
  }

  // Blocks so that `table` holds `tokens` positions; the ids added.
  std::vector<int32_t> Grow(std::vector<int32_t>& table, int64_t tokens) {
    std::vector<int32_t> added;
    while (std::ssize(table) < BlockManager::BlocksFor(tokens, kBlockSize) && !free_.empty()) {
      added.push_back(free_.back());
      table.push_back(free_.back());
      free_.pop_back();
    }
    return added;
  }

  // As Scheduler::OnStepDone: the blocks of `table` past `computed` positions
  // (slots of rejected proposals) back to the pool; the table's new length,
  // the next plan's keep_blocks, or -1 when nothing was cut.
  int64_t Trim(std::vector<int32_t>& table, int64_t computed) {
    if (std::ssize(table) <= BlockManager::BlocksFor(computed, kBlockSize)) return -1;
    while (std::ssize(table) > BlockManager::BlocksFor(computed, kBlockSize)) {
      free_.push_back(table.back());
      table.pop_back();
    }
    return std::ssize(table);
  }

  // Generates `n` tokens for sequence `id` on both runners; with `oracle`,
  // it speculates: after each step rank 0 proposes 1 to kProposals of its
  // next tokens (OracleProposer), and the next step has kProposals slots.
  std::vector<int32_t> Generate(uint64_t id, const std::vector<int32_t>& prompt, const SamplingParams& sampling,
                                const std::vector<int32_t>* oracle, std::mt19937_64& rng) {
    oracles_[id] = Oracle{.tokens = oracle, .prompt = std::ssize(prompt), .seed = rng()};
    const int32_t ask = oracle != nullptr ? kProposals : 0;
    std::vector<int32_t> out, table;
    StepPlan first;
    first.finished.swap(done_);
    first.new_sequences.push_back(NewSequencePlan{.seq_id = id, .prompt = prompt, .token_ids = prompt,
                                                  .block_ids = Grow(table, std::ssize(prompt)),
                                                  .sampling = sampling, .sample = true,
                                                  .speculate = oracle != nullptr, .num_proposals = ask});
    first.order = {id};
    std::vector<StepToken> got = Run(first);
    if (got.empty()) return out;
    out.push_back(got[0].sampled.token);
    int64_t computed = std::ssize(prompt);
    int64_t keep = -1;  // the next plan's keep_blocks: the table was cut since
    for (int64_t step = 0; std::ssize(out) < kTokens && !::testing::Test::HasFailure(); ++step) {
      ContinuingSequencePlan c{.seq_id = id, .sample = true, .decode_sampled = true, .num_proposals = ask};
      if (oracle != nullptr) {
        c.num_draft_slots = static_cast<int32_t>(std::clamp<int64_t>(kTokens - std::ssize(out) - 1, 0, kProposals));
        verifications_ += graphs_->runner->drafts(id).empty() || c.num_draft_slots == 0 ? 0 : 1;
        EXPECT_EQ(graphs_->runner->drafts(id), eager_->runner->drafts(id));
      }
      c.keep_blocks = std::exchange(keep, -1);
      c.new_block_ids = Grow(table, computed + 1 + c.num_draft_slots);
      StepPlan plan;
      plan.continuing.push_back(c);
      plan.order = {id};
      got = Run(plan);
      if (got.empty()) return out;
      accepted_ += std::ssize(got) - 1;
      for (const StepToken& t : got) out.push_back(t.sampled.token);
      computed += std::ssize(got);
      if (const int64_t cut = Trim(table, computed); cut >= 0) keep = cut;
    }
    done_.push_back(id);
    free_.insert(free_.end(), table.begin(), table.end());
    return out;
  }

  // Generates kBatchTokens tokens for each sequence ids[i] (prompts[i],
  // sampling[i]) together on both runners, as Generate does for one: a
  // sequence leaves the batch when it has its tokens. With `oracle`, sequence
  // i speculates on (*oracle)[i]; a step with proposals is counted in
  // batch_verifications_ when its last sequence used some (every sequence is
  // then in the prefill group: a verification graph's shape), else in
  // eager_verifications_. Without, the eager runner alone generates (the
  // oracle's tokens: plain decode steps, which sampler_graph_test holds to
  // their graphs; it halves the emulated run's steps).
  std::vector<std::vector<int32_t>> GenerateBatch(const std::vector<uint64_t>& ids,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  const std::vector<SamplingParams>& sampling,
                                                  const std::vector<std::vector<int32_t>>* oracle,
                                                  std::mt19937_64& rng) {
    const size_t n = ids.size();
    const int32_t ask = oracle != nullptr ? kBatchProposals : 0;
    const bool eager_only = oracle == nullptr;
    std::vector<std::vector<int32_t>> out(n), tables(n);
    std::vector<int64_t> computed(n), keep(n, -1);
    StepPlan first;
    if (!eager_only) first.finished.swap(done_);  // else both runners finish them in the next plan
    for (size_t i = 0; i < n; ++i) {
      oracles_[ids[i]] = Oracle{.tokens = oracle != nullptr ? &(*oracle)[i] : nullptr,
                                .prompt = std::ssize(prompts[i]), .seed = rng(), .length = kBatchTokens,
                                .max_k = kBatchProposals, .may_skip = true};
      first.new_sequences.push_back(NewSequencePlan{.seq_id = ids[i], .prompt = prompts[i], .token_ids = prompts[i],
                                                    .block_ids = Grow(tables[i], std::ssize(prompts[i])),
                                                    .sampling = sampling[i], .sample = true,
                                                    .speculate = oracle != nullptr, .num_proposals = ask});
      first.order.push_back(ids[i]);
      computed[i] = std::ssize(prompts[i]);
    }
    std::vector<StepToken> got = Run(first, eager_only);
    if (got.size() != n) return out;
    for (size_t i = 0; i < n; ++i) out[i].push_back(got[i].sampled.token);
    while (!::testing::Test::HasFailure()) {
      StepPlan plan;
      std::vector<size_t> live;
      for (size_t i = 0; i < n; ++i) {
        if (std::ssize(out[i]) >= kBatchTokens) continue;
        ContinuingSequencePlan c{.seq_id = ids[i], .sample = true, .decode_sampled = true, .num_proposals = ask};
        if (oracle != nullptr) {
          c.num_draft_slots =
              static_cast<int32_t>(std::clamp<int64_t>(kBatchTokens - std::ssize(out[i]) - 1, 0, kBatchProposals));
          EXPECT_EQ(graphs_->runner->drafts(ids[i]), eager_->runner->drafts(ids[i]));
        }
        c.keep_blocks = std::exchange(keep[i], -1);
        c.new_block_ids = Grow(tables[i], computed[i] + 1 + c.num_draft_slots);
        plan.continuing.push_back(std::move(c));
        plan.order.push_back(ids[i]);
        live.push_back(i);
      }
      if (live.empty()) break;
      got = Run(plan, eager_only);
      if (got.empty()) return out;
      std::map<uint64_t, int32_t> proposed;  // each sequence's num_proposed (its first token's)
      for (const StepToken& t : got) proposed.emplace(t.seq_id, t.num_proposed);
      if (proposed[ids[live.back()]] > 0) {
        ++batch_verifications_[live.size()];
      } else if (std::any_of(proposed.begin(), proposed.end(), [](const auto& p) { return p.second > 0; })) {
        ++eager_verifications_;
      }
      for (size_t i : live) {
        int64_t tokens = 0;
        for (const StepToken& t : got) {
          if (t.seq_id != ids[i]) continue;
          out[i].push_back(t.sampled.token);
          ++tokens;
        }
        computed[i] += tokens;
        accepted_ += std::max<int64_t>(tokens - 1, 0);
        if (const int64_t cut = Trim(tables[i], computed[i]); cut >= 0) keep[i] = cut;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      done_.push_back(ids[i]);
      free_.insert(free_.end(), tables[i].begin(), tables[i].end());
    }
    return out;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Runner> graphs_, eager_;
  std::vector<int32_t> free_;
  std::vector<uint64_t> done_;
  std::map<uint64_t, Oracle> oracles_;  // each sequence's proposals, by id
  std::map<size_t, int64_t> batch_verifications_;  // verification steps whose last sequence verified, by batch
  int64_t eager_verifications_ = 0;  // steps with proposals whose last sequence had none
  int64_t verifications_ = 0;  // steps that carried proposals
  int64_t accepted_ = 0;       // proposals kept
  int64_t logits_rows_ = 0;    // host-sampled rows compared
};

TEST_P(SpeculativeGraphTest, ReplayedVerificationStepsGiveTheEagerTokens) {
  ASSERT_NO_FATAL_FAILURE(MakeRunners(1, kProposals, kProposals));  // one sequence at a time: 4 graphs
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " (TPSERVE_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(testing::Message() << (round == 0 ? "greedy" : "seeded"));
    std::vector<int32_t> prompt(static_cast<size_t>(3 + rng() % 6));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % kVocab);
    SamplingParams sampling;
    sampling.logprobs = 0;
    sampling.temperature = 0;
    if (round == 1) {
      sampling.temperature = 0.9f;
      sampling.top_p = 0.95f;
      sampling.seed = rng();
    }
    const uint64_t id = 10 + 2 * static_cast<uint64_t>(round);
    const std::vector<int32_t> plain = Generate(id, prompt, sampling, nullptr, rng);
    const std::vector<int32_t> spec = Generate(id + 1, prompt, sampling, &plain, rng);
    ASSERT_FALSE(HasFailure());
    EXPECT_EQ(std::ssize(spec), kTokens);
  }
  EXPECT_GT(verifications_, 0);
  EXPECT_GT(accepted_, 0) << "no proposal was kept: the verification rows were never used past the first";
  EXPECT_GE(logits_rows_, verifications_) << "every verification step samples at least one row on the host";
  const int64_t replayed = graphs_->runner->verify_graph_replays();
  EXPECT_EQ(replayed, verifications_) << "every verification step (one sequence, k <= 4) replays a graph";
  EXPECT_EQ(eager_->runner->graph_replays(), 0);
}

// Batches of 2 to 8 sequences speculating together, each with its own k a
// step (1 to kBatchProposals proposals at first, then 0 to kBatchProposals,
// fewer near its end), every other one seeded: the graph runner's tokens,
// log-probs and logits rows equal the eager runner's, every verification
// step whose last sequence verified replays a graph (its (S, T)), and each
// batch size had one; the steps whose last sequence had no proposals ran
// eagerly, with the same bits.
TEST_P(SpeculativeGraphTest, BatchedVerificationStepsGiveTheEagerTokens) {
  ASSERT_NO_FATAL_FAILURE(MakeRunners(kMaxBatch, kBatchProposals, kMaxBatch * kBatchProposals));
  std::vector<int32_t> ks;
  for (int32_t k = 1; k <= kBatchProposals; ++k) ks.push_back(k);
  ASSERT_EQ(graphs_->runner->verify_graph_proposals(), ks);
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " (TPSERVE_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  for (int32_t batch = 2; batch <= kMaxBatch; ++batch) {
    SCOPED_TRACE(testing::Message() << "batch " << batch);
    std::vector<uint64_t> ids, spec_ids;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<SamplingParams> sampling;
    for (int32_t i = 0; i < batch; ++i) {
      ids.push_back(100 + 20 * static_cast<uint64_t>(batch) + static_cast<uint64_t>(i));
      spec_ids.push_back(ids.back() + 10);
      std::vector<int32_t> prompt(static_cast<size_t>(3 + rng() % 6));
      for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % kVocab);
      prompts.push_back(std::move(prompt));
      SamplingParams p;
      p.logprobs = 0;
      p.temperature = 0;
      if (i % 2 == 1) {
        p.temperature = 0.9f;
        p.top_p = 0.95f;
        p.seed = rng();
      }
      sampling.push_back(p);
    }
    const std::vector<std::vector<int32_t>> plain = GenerateBatch(ids, prompts, sampling, nullptr, rng);
    const std::vector<std::vector<int32_t>> spec = GenerateBatch(spec_ids, prompts, sampling, &plain, rng);
    ASSERT_FALSE(HasFailure());
    for (const std::vector<int32_t>& out : spec) EXPECT_EQ(std::ssize(out), kBatchTokens);
    // Its first step after the prefill: every sequence has 1 to kBatchProposals proposals.
    EXPECT_GE(batch_verifications_[static_cast<size_t>(batch)], 1);
  }
  EXPECT_GT(accepted_, 0) << "no proposal was kept";
  int64_t verifications = 0;
  for (const auto& [batch, steps] : batch_verifications_) verifications += steps;
  EXPECT_EQ(graphs_->runner->verify_graph_replays(), verifications)
      << "every step whose last sequence verifies replays its graph ("
      << eager_verifications_ << " others ran eagerly)";
  EXPECT_GT(eager_verifications_, 0) << "no verification step without a graph was compared";
  EXPECT_EQ(eager_->runner->graph_replays(), 0);
}

INSTANTIATE_TEST_SUITE_P(KernelSets, SpeculativeGraphTest,
                         ::testing::Values(Config{"fast", cuda::KernelSet::kFast, false},
                                           Config{"reference", cuda::KernelSet::kReference, false},
                                           Config{"deterministic", cuda::KernelSet::kFast, true}),
                         [](const ::testing::TestParamInfo<Config>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tpserve
