// Batch invariance of the CUDA backend's deterministic mode, end to end
// through the offline engine (the serving scheduler and step runner, decode
// steps as CUDA graphs, the GPU sampler on rank 0): the counterpart of
// tests/worker/batch_invariance_test.cc (the CPU backend) with the real
// kernels of cuda/ (label gpu; label cuda-emu runs them on the CPU). One
// request run alone gives exactly the same token ids, log-probs and logits,
// every bit, when it
//   * shares its steps with other requests of other lengths, in random
//     makeups and positions, under step budgets that mix its prefill (whole
//     or chunked) with their prefills and decodes, and block sizes 1 to 16;
//   * is prefilled in chunks of 1 token up to the whole prompt;
//   * finds its prompt's prefix in the prefix cache, or not;
//   * is preempted and recomputed (its generated tokens' K/V then come from
//     the prefill kernel, not the decode rows that first computed them);
//   * runs its decode steps eagerly instead of as CUDA graphs;
// at tp 1 and at tp 2 (two ranks as threads on one device over gloo, the
// all-reduce through cuda/rank_order_all_reduce.h as NCCL ranks have it).
// Logits are compared in runs that return them (host sampling); token ids and
// log-probs also in runs that sample on the GPU (the one-block-per-row
// sampler of deterministic mode). The model's head dim (64) and GQA group (2)
// take the deterministic attention kernel, and the backend's partition size
// is shrunk to 32 keys, so contexts cross partitions (and, split over blocks
// after Reserve, the merge kernel runs); K = 100 at tp 2 (down_proj's rank
// shard) takes the GEMM's element-wise loads. What makes it hold:
// docs/architecture.md, "The CUDA backend's deterministic mode".
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#include "cuda/rank_order_all_reduce.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_model.h"
#include "tests/cuda/test_sizes.h"
#include "tests/testing/rank_engines.h"
#include "tests/testing/seed.h"
#include "worker/engine.h"
#if defined(TPSERVE_WITH_GLOO)
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#endif

namespace tpserve {
namespace {

using testing_util::RankEngines;
using testing_util::RankParts;

constexpr int32_t kVocab = 397;
constexpr int64_t kHidden = 136;
constexpr int64_t kMaxTokens = 2048;  // the largest step budget below
constexpr int kPartitionKeys = 32;
// Sequences a step may hold: the decode graphs' buckets (1, 2, 4, 8, then
// multiples of 16) are each captured at warm-up, which the emulation pays for.
constexpr int64_t kMaxSeqs = cuda_test::kEmulated ? 16 : 80;

// The ranks of one tensor-parallel group inside this process, as rank/ starts
// deterministic CUDA ranks: the backend in deterministic mode, the
// all-reduce in rank order, and rank 0's sampler one block per row.
class Group {
 public:
  static std::unique_ptr<Group> Make(int tp, const std::filesystem::path& store_dir) {
    auto g = std::unique_ptr<Group>(new Group);
    g->ranks_.resize(static_cast<size_t>(tp));
    std::vector<absl::Status> status(static_cast<size_t>(tp));
    auto start = [&](int r) -> absl::Status {
      Rank& rank = g->ranks_[r];
      CudaBackendOptions options;
      options.deterministic = true;
      options.deterministic_partition_keys = kPartitionKeys;
      rank.backend = MakeCudaBackend(0, options);
      const auto stream = static_cast<cudaStream_t>(rank.backend->stream());
      if (tp == 1) {
        rank.comm = MakeSoloCommunicator();
      } else {
#if defined(TPSERVE_WITH_GLOO)
        absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(store_dir.string());
        if (!store.ok()) return store.status();
        GlooOptions gloo;
        gloo.timeout = std::chrono::seconds(120);
        absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeGlooCommunicator(**store, r, tp, gloo);
        if (!comm.ok()) return comm.status();
        absl::StatusOr<std::unique_ptr<Communicator>> ordered =
            cuda::MakeRankOrderAllReduce(*std::move(comm), stream, kMaxTokens * kHidden);
        if (!ordered.ok()) return ordered.status();
        rank.comm = *std::move(ordered);
#else
        (void)store_dir;
        return absl::UnimplementedError("tp 2 needs gloo");
#endif
      }
      if (r == 0) {
        cuda::CudaSampler::Options sampling;
        sampling.max_seqs = static_cast<int32_t>(kMaxSeqs);
        sampling.vocab_size = kVocab;
        sampling.max_logprobs = 5;
        sampling.kernels = cuda::KernelSet::kReference;  // as rank/ makes it in deterministic mode
        absl::StatusOr<std::unique_ptr<cuda::CudaSampler>> sampler = cuda::CudaSampler::Create(sampling, stream);
        if (!sampler.ok()) return sampler.status();
        rank.sampler = *std::move(sampler);
      }
      return absl::OkStatus();
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < tp; ++r) threads.emplace_back([&, r] { status[r] = start(r); });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < tp; ++r) {
      EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
      if (!status[r].ok()) return nullptr;
    }
    return g;
  }

  int size() const { return static_cast<int>(ranks_.size()); }

  // Engines over the same options on every rank (reused across Generate
  // calls, so the prefix cache carries over); rank 0 samples on the GPU
  // unless the options return logits.
  RankEngines Create(const std::filesystem::path& model, const EngineOptions& options) {
    std::vector<RankParts> parts;
    for (int r = 0; r < size(); ++r) parts.push_back({ranks_[r].backend.get(), ranks_[r].comm.get(), ranks_[r].sampler.get()});
    return RankEngines::Create(model, parts, options);
  }

  std::vector<GenerationResult> GenerateOnce(const std::filesystem::path& model, const EngineOptions& options,
                                             const std::vector<GenerationRequest>& requests,
                                             GenerationStats* stats = nullptr) {
    return Create(model, options).Generate(requests, stats);
  }

 private:
  struct Rank {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Communicator> comm;
    std::unique_ptr<cuda::CudaSampler> sampler;  // destroyed first: it and comm use the backend's stream
  };
  Group() = default;
  std::vector<Rank> ranks_;
};


// The two ways a run reads its results: logits back to the host (and the host
// sampler), or the served path's GPU sampler.
enum class Reading { kLogits, kGpuSampler };

class DeterministicEngineTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    // Qwen3 (q/k norm), head dim 64 and GQA 2 (the deterministic attention
    // kernel), hidden 136 (GEMM stages past 64, 17 column blocks of the
    // LM head's 397), intermediate 200 (100 a rank at tp 2: element-wise loads).
    dir_ = new std::filesystem::path(cuda_test::MakeTestModel(
        "tpserve_deterministic", "qwen3",
        "--arch qwen3 --hidden 136 --intermediate 200 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 "
        "--vocab 397 --tie 0 --seed 41 --max-pos 512"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
#if !defined(TPSERVE_WITH_GLOO)
    if (GetParam() > 1) GTEST_SKIP() << "tp 2 needs gloo";
#endif
    group_ = Group::Make(GetParam(), *dir_ / absl::StrCat("store-", store_count_++));
    ASSERT_NE(group_, nullptr);
    seed_ = testing_util::TestSeed();
    rng_.seed(seed_);
    // The request under test: a 37-token prompt, sampled with its own seed,
    // with log-probs; the same in every test (its results alone are computed
    // once per tp size), the others drawn from the test's seed.
    std::mt19937_64 target_rng(28);
    for (int i = 0; i < 37; ++i) target_.prompt.push_back(static_cast<int32_t>(target_rng() % kVocab));
    target_.max_tokens = 9;
    target_.ignore_eos = true;
    target_.sampling.temperature = 0.9f;
    target_.sampling.top_p = 0.95f;
    target_.sampling.seed = 1234;
    target_.sampling.logprobs = 3;
    // Alone, once per tp size and reading for the whole suite.
    for (Reading reading : {Reading::kLogits, Reading::kGpuSampler}) {
      GenerationResult& alone = alone_[GetParam()][static_cast<int>(reading)];
      if (!alone.tokens.empty()) continue;
      const std::vector<GenerationResult> got = group_->GenerateOnce(model(), Options(reading), {target_});
      ASSERT_EQ(got.size(), 1u);
      ASSERT_EQ(std::ssize(got[0].tokens), target_.max_tokens);
      ASSERT_EQ(got[0].logits.size(), reading == Reading::kLogits ? got[0].tokens.size() : 0u);
      alone = got[0];
    }
  }

  static std::filesystem::path model() { return *dir_; }
  static EngineOptions Options(Reading reading) {
    EngineOptions o;
    o.return_logits = reading == Reading::kLogits;
    o.block_size = 4;
    o.model.max_num_tokens = kMaxTokens;
    o.model.max_num_seqs = kMaxSeqs;
    o.model.max_position = 512;
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
    if (rng_() % 4 == 0) r.sampling.logprobs = 1;
    return r;
  }
  void ExpectSameAsAlone(const GenerationResult& got, Reading reading, const std::string& what) {
    const std::string d = testing_util::BitDifference(got, alone_[GetParam()][static_cast<int>(reading)]);
    EXPECT_TRUE(d.empty()) << what << (reading == Reading::kLogits ? " (logits read)" : " (GPU sampler)") << ": "
                           << d;
  }

  static std::filesystem::path* dir_;
  static int store_count_;
  std::unique_ptr<Group> group_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  GenerationRequest target_;
  static GenerationResult alone_[3][2];  // [tp][Reading]: the request alone
};
std::filesystem::path* DeterministicEngineTest::dir_ = nullptr;
int DeterministicEngineTest::store_count_ = 0;
GenerationResult DeterministicEngineTest::alone_[3][2];

TEST_P(DeterministicEngineTest, ChunkedPrefillOfAnySizeGivesTheSameBits) {
  for (int64_t chunk : {1, 5, 16, 36, 37}) {
    for (Reading reading : {Reading::kLogits, Reading::kGpuSampler}) {
      EngineOptions o = Options(reading);
      o.model.max_num_tokens = chunk;
      const std::vector<GenerationResult> got = group_->GenerateOnce(model(), o, {target_});
      ASSERT_EQ(got.size(), 1u);
      ExpectSameAsAlone(got[0], reading, absl::StrCat("prefill in chunks of ", chunk));
    }
  }
}

// Random makeups: others of 1-48 prompt tokens, some asking for log-probs
// (which, on a fast-set server, would switch every row's sampler), the request
// anywhere among them, under step budgets that mix its prefill with their
// prefills and decodes, and block sizes 1 to 16.
TEST_P(DeterministicEngineTest, AnyBatchMakeupGivesTheSameBits) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed_);
  // The largest makeup prefills everything in one step, so its first decode
  // steps hold every sequence (a GEMM of 13 rows where alone there is 1).
  const int64_t budgets[] = {64, 13, 2048};
  const int32_t block_sizes[] = {4, 1, 16};
  const std::vector<int> makeups = cuda_test::kEmulated ? std::vector<int>{1, 3, 12} : std::vector<int>{1, 3, 64, 17};
  int round = 0;
  for (int others : makeups) {
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < others; ++i) requests.push_back(RandomRequest());
    const size_t at = static_cast<size_t>(rng_() % (requests.size() + 1));
    requests.insert(requests.begin() + static_cast<std::ptrdiff_t>(at), target_);
    const Reading reading = round % 2 == 0 ? Reading::kLogits : Reading::kGpuSampler;
    EngineOptions o = Options(reading);
    o.model.max_num_tokens = budgets[round % 3];
    o.block_size = block_sizes[round % 3];
    ++round;
    const std::string what = absl::StrCat("among ", others, " others at position ", at, ", step budget ",
                                          o.model.max_num_tokens, ", block size ", o.block_size);
    const std::vector<GenerationResult> got = group_->GenerateOnce(model(), o, requests);
    ASSERT_EQ(got.size(), requests.size()) << what;
    ExpectSameAsAlone(got[at], reading, what);
  }
}

// The prompt's first 8 blocks from the cache: after a request that shares
// them (and the prompt itself, once more: all but its last block cached).
TEST_P(DeterministicEngineTest, APrefixFromTheCacheGivesTheSameBits) {
  for (Reading reading : {Reading::kLogits, Reading::kGpuSampler}) {
    EngineOptions o = Options(reading);
    o.num_blocks = 64;  // fixed: the cache (and its prefix index) outlives each Generate
    RankEngines engines = group_->Create(model(), o);
    GenerationRequest sharer = RandomRequest();
    sharer.prompt.assign(target_.prompt.begin(), target_.prompt.begin() + 33);
    sharer.prompt.push_back(5);
    ASSERT_EQ(engines.Generate({sharer}).size(), 1u);
    for (const char* what : {"after a request sharing 33 prompt tokens", "the same prompt once more"}) {
      const std::vector<GenerationResult> got = engines.Generate({target_});
      ASSERT_EQ(got.size(), 1u);
      EXPECT_GE(got[0].cached_tokens, 32) << what << ": the prefix was not found";
      ExpectSameAsAlone(got[0], reading, what);
    }
  }
}

// Two requests in a pool too small for both to finish: the later one (the
// request under test) is preempted and recomputed, from the prefix cache or
// whole; its output tokens' K/V are then computed as prefill rows.
TEST_P(DeterministicEngineTest, PreemptionAndRecomputeGiveTheSameBits) {
  GenerationRequest first = RandomRequest();
  first.prompt = RandomTokens(16);
  first.max_tokens = 30;
  for (bool prefix_cache : {true, false}) {
    const Reading reading = prefix_cache ? Reading::kLogits : Reading::kGpuSampler;
    EngineOptions o = Options(reading);
    o.num_blocks = 15;  // blocks of 4: 4 + 10 to start, each grows by one every 4 tokens
    o.enable_prefix_caching = prefix_cache;
    GenerationStats stats;
    const std::vector<GenerationResult> got = group_->GenerateOnce(model(), o, {first, target_}, &stats);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_GT(stats.preemptions, 0) << "nothing was preempted";
    ExpectSameAsAlone(got[1], reading,
                      absl::StrCat("preempted and recomputed, prefix cache ", prefix_cache ? "on" : "off"));
  }
}

// Decode steps eagerly instead of as CUDA graphs (at tp 1 the alone runs
// replay captured graphs; gloo at tp 2 cannot capture, so both are eager there).
TEST_P(DeterministicEngineTest, EagerStepsGiveTheGraphsBits) {
  for (Reading reading : {Reading::kLogits, Reading::kGpuSampler}) {
    EngineOptions o = Options(reading);
    o.enforce_eager = true;
    const std::vector<GenerationResult> got = group_->GenerateOnce(model(), o, {target_});
    ASSERT_EQ(got.size(), 1u);
    ExpectSameAsAlone(got[0], reading, "decode steps eager");
  }
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, DeterministicEngineTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat("tp", info.param); });

}  // namespace
}  // namespace tpserve
