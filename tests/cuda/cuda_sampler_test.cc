// CudaSampler against the host sampler tpserve::Sample on the same bf16-rounded
// logits and the same per-sequence seeds: S in {1, 3, 19, 111}, V in {7, 4097,
// 128256}, the tp = 1 and tp = 2 gather layouts, every filter, penalties,
// token-level controls (logit_bias, allowed_token_ids, bad_words) and log-probs; and seeded determinism whatever the row's position in the batch.
// The emulated run (label cuda-emu) takes S <= 19 and V = 1031 for 128256
// (tests/cuda/test_sizes.h).
//
// Tokens must be equal, except where the sequence's uniform lies within
// kUniformSlack of a boundary of the cumulative distribution (fp32 weights
// summed in fp64 on the GPU, fp64 weights on the host): then both tokens must
// be what the row algorithm gives at u ± kUniformSlack (run on the host).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_sampler.h"
#include "cuda/sampling.cuh"
#include "cuda/sampling_inputs.h"
#include "sampling/sampling_row.h"
#include "model/dtype.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_sizes.h"
#include "sampling/sampler.h"
#include "tests/testing/seed.h"

namespace tpserve::cuda {
namespace {

using sampling::PenaltyEntry;
using sampling::RowParams;

constexpr double kUniformSlack = 1e-6;
constexpr float kLogprobTol = 1e-5f;

std::shared_ptr<const TokenControls> Controls(TokenControls c) {
  NormalizeTokenControls(c);
  return std::make_shared<const TokenControls>(std::move(c));
}

std::vector<SamplingParams> ParamSets() {
  std::vector<SamplingParams> sets(13);
  sets[0].temperature = 0;
  sets[1].temperature = 0.7f;
  sets[2].min_p = 0.05f;
  sets[3].top_k = 40;
  sets[4].top_p = 0.9f;
  sets[5].temperature = 0.8f, sets[5].min_p = 0.02f, sets[5].top_k = 50, sets[5].top_p = 0.95f;
  sets[6].repetition_penalty = 1.3f, sets[6].frequency_penalty = 0.4f,
  sets[6].presence_penalty = 0.2f;
  sets[7].temperature = 0, sets[7].repetition_penalty = 0.7f, sets[7].presence_penalty = -1.0f;
  sets[8].logprobs = 5, sets[8].top_k = 3;
  sets[9].logprobs = 0, sets[9].top_p = 0.5f, sets[9].frequency_penalty = 1.0f;
  // Token-level controls (ids past a small vocabulary are dropped by both samplers alike).
  sets[10].temperature = 0.9f, sets[10].top_p = 0.9f;
  sets[10].controls = Controls({.logit_bias = {{0, 3.0f}, {2, -100.0f}, {5, 1.5f}, {40, 2.0f}, {1000, -1.0f}}});
  sets[11].top_k = 4, sets[11].logprobs = 2, sets[11].repetition_penalty = 1.2f;
  sets[11].controls = Controls({.logit_bias = {{3, 2.0f}, {4, 50.0f}},
                                .allowed_token_ids = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 4000}});
  sets[12].temperature = 0, sets[12].repetition_penalty = 1.2f;
  sets[12].controls = Controls({.bad_words = {{1}, {2, 3}, {0, 0}}});
  return sets;
}

// Host-side logits in the gather layout [tp, S, Vs], bf16 bits; the padding
// holds bf16 +inf, which would win every argmax if it were ever read.
struct HostGathered {
  int tp, rows, shard_vocab, vocab;
  std::vector<uint16_t> bits;

  uint16_t& at(int s, int i) {
    return bits[(static_cast<size_t>(i / shard_vocab) * rows + s) * shard_vocab + i % shard_vocab];
  }
  std::vector<float> Flat() {  // [S, V] fp32 for the host sampler
    std::vector<float> flat(static_cast<size_t>(rows) * vocab);
    for (int s = 0; s < rows; ++s) {
      for (int i = 0; i < vocab; ++i) flat[static_cast<size_t>(s) * vocab + i] = Bf16ToFloat(at(s, i));
    }
    return flat;
  }
};

HostGathered RandomLogits(std::mt19937_64& rng, int tp, int rows, int vocab) {
  HostGathered g{tp, rows, (vocab + tp - 1) / tp, vocab, {}};
  g.bits.assign(static_cast<size_t>(tp) * rows * g.shard_vocab, 0x7f80);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int s = 0; s < rows; ++s) {
    for (int i = 0; i < vocab; ++i) g.at(s, i) = FloatToBf16(normal(rng));
  }
  return g;
}

// A device copy of host data, freed at scope exit.
struct DeviceCopy {
  void* ptr = nullptr;
  DeviceCopy(const void* host, size_t bytes) {
    CUDA_CHECK(cudaMalloc(&ptr, bytes));
    CUDA_CHECK(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice));
  }
  ~DeviceCopy() { cudaFree(ptr); }
};

int32_t HostRowToken(HostGathered& g, int s, const RowParams& p,
                     const std::vector<PenaltyEntry>& entries) {
  sampling::SerialBlock block;
  sampling::GatheredRow<uint16_t> row{g.bits.data() + static_cast<size_t>(s) * g.shard_vocab,
                                      static_cast<int64_t>(g.rows) * g.shard_vocab, g.shard_vocab,
                                      g.vocab};
  std::vector<uint32_t> seen((g.vocab + 31) / 32);
  int32_t counter = 0;
  std::vector<sampling::TopLogprob> top(std::max(p.num_logprobs, 0) + 1);
  sampling::RowSampler<sampling::SerialBlock, uint16_t> sampler(
      block, row, entries.data(), static_cast<int32_t>(entries.size()), p,
      sampling::RowScratch{seen.data(), &counter});
  return sampler.Run(top.data()).token;
}

struct Sequences {
  std::vector<std::unique_ptr<SequenceSamplingState>> gpu, ref, twin;
  std::vector<SequenceSamplingState*> Ptrs(std::vector<std::unique_ptr<SequenceSamplingState>>& v) {
    std::vector<SequenceSamplingState*> p;
    for (auto& q : v) p.push_back(q.get());
    return p;
  }
};

// Row s takes a random parameter set, or set s % sets when `in_order`.
Sequences MakeSequences(std::mt19937_64& rng, int rows, int vocab, bool in_order = false) {
  Sequences seqs;
  const std::vector<SamplingParams> sets = ParamSets();
  std::uniform_int_distribution<int32_t> any_token(0, vocab - 1);
  for (int s = 0; s < rows; ++s) {
    SamplingParams p = sets[in_order ? s % sets.size() : (s + rng() % sets.size()) % sets.size()];
    p.seed = rng();
    std::vector<int32_t> prompt(17), output(4);
    for (int32_t& t : prompt) t = any_token(rng);
    for (int32_t& t : output) t = any_token(rng);
    seqs.gpu.push_back(std::make_unique<SequenceSamplingState>(p, prompt, output));
    seqs.ref.push_back(std::make_unique<SequenceSamplingState>(p, prompt, output));
    seqs.twin.push_back(std::make_unique<SequenceSamplingState>(p, prompt, output));
  }
  return seqs;
}

void CompareWithHost(int tp, int rows, int vocab, uint64_t seed, bool every_set = false, int steps = 3) {
  SCOPED_TRACE("tp=" + std::to_string(tp) + " S=" + std::to_string(rows) +
               " V=" + std::to_string(vocab) + " seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CudaSampler::Options options;
  options.max_seqs = rows;
  options.vocab_size = vocab;
  options.max_logprobs = 8;
  options.penalty_entries = 16;  // small on purpose: the first penalised step must grow it
  auto sampler = CudaSampler::Create(options, stream);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  Sequences seqs = MakeSequences(rng, rows, vocab, every_set);
  std::vector<bool> diverged(rows, false);
  for (int step = 0; step < steps; ++step) {
    HostGathered g = RandomLogits(rng, tp, rows, vocab);
    DeviceCopy device(g.bits.data(), g.bits.size() * sizeof(uint16_t));
    const Tensor gathered(device.ptr, DType::kBF16, Device::kCuda, {tp, rows, g.shard_vocab});
    const std::vector<SampledToken> got = (*sampler)->Sample(gathered, vocab, seqs.Ptrs(seqs.gpu));
    const std::vector<SampledToken> want = Sample(g.Flat(), vocab, vocab, seqs.Ptrs(seqs.ref));
    ASSERT_EQ(got.size(), want.size());
    for (int s = 0; s < rows; ++s) {
      if (diverged[s]) continue;
      SCOPED_TRACE("step=" + std::to_string(step) + " row=" + std::to_string(s));
      std::vector<PenaltyEntry> entries;
      const bool allowed_only = sampling::AppendRowEntries(*seqs.twin[s], vocab, entries).allowed_only;
      const double u = seqs.twin[s]->NextUniform();
      if (got[s].token != want[s].token) {
        RowParams p = sampling::MakeRowParams(seqs.twin[s]->params(), u);
        p.allowed_only = allowed_only ? 1 : 0;
        RowParams lower = p, upper = p;
        lower.uniform = std::max(0.0, u - kUniformSlack);
        upper.uniform = std::min(1.0, u + kUniformSlack);
        const int32_t near[] = {HostRowToken(g, s, lower, entries), HostRowToken(g, s, p, entries),
                                HostRowToken(g, s, upper, entries)};
        auto is_near = [&](int32_t t) { return std::find(std::begin(near), std::end(near), t) != std::end(near); };
        EXPECT_TRUE(is_near(got[s].token) && is_near(want[s].token))
            << "GPU chose " << got[s].token << ", host sampler " << want[s].token << " at u=" << u
            << "; within " << kUniformSlack << " of u the row algorithm gives " << near[0] << " / "
            << near[1] << " / " << near[2];
      }
      if (seqs.ref[s]->params().logprobs >= 0) {
        EXPECT_NEAR(got[s].logprob, want[s].logprob, kLogprobTol);
        ASSERT_EQ(got[s].top.size(), want[s].top.size());
        for (size_t k = 0; k < got[s].top.size(); ++k) {
          EXPECT_EQ(got[s].top[k].first, want[s].top[k].first) << "top " << k;
          EXPECT_NEAR(got[s].top[k].second, want[s].top[k].second, kLogprobTol) << "top " << k;
        }
      }
      // After a boundary case the histories (and so the penalties) differ:
      // stop comparing that row.
      if (got[s].token != want[s].token) diverged[s] = true;
      seqs.twin[s]->AppendOutput(want[s].token);
    }
  }
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(CudaSampler, MatchesHostSampler) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  for (int tp : {1, 2}) {
    for (int rows : {1, 3, 19, 111}) {
      if (rows > cuda_test::kMaxSampleRows) continue;
      for (int vocab : {7, 4097, cuda_test::kLargeVocab}) CompareWithHost(tp, rows, vocab, seed + rows * 7 + vocab);
    }
  }
}

// Every parameter set in one batch, the token-level controls' among them
// (logit_bias, allowed_token_ids with the raw log-probs, bad words against
// the output's tail), over several steps: the rows with entries run the row
// kernel beside rows the sliced path could take, all as the host sampler.
TEST(CudaSampler, TokenControlsMatchHostSampler) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  const int sets = static_cast<int>(ParamSets().size());
  for (int tp : {1, 2}) CompareWithHost(tp, sets, 4097, seed + tp, /*every_set=*/true, /*steps=*/6);
}

// f32 logits take the same path as bf16 (the LM head of an f32 build).
TEST(CudaSampler, F32LogitsMatchHostSampler) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int rows = 5, vocab = 4097;
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : logits) x = normal(rng);
  Sequences seqs = MakeSequences(rng, rows, vocab);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto sampler = CudaSampler::Create({rows, vocab, 8, 0}, stream);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  DeviceCopy device(logits.data(), logits.size() * sizeof(float));
  const Tensor gathered(device.ptr, DType::kF32, Device::kCuda, {1, rows, vocab});
  const auto got = (*sampler)->Sample(gathered, vocab, seqs.Ptrs(seqs.gpu));
  const auto want = Sample(logits, vocab, vocab, seqs.Ptrs(seqs.ref));
  for (int s = 0; s < rows; ++s) {
    EXPECT_EQ(got[s].token, want[s].token) << "row " << s << " (a boundary case is ~1e-6 likely)";
    if (seqs.ref[s]->params().logprobs >= 0) {
      EXPECT_NEAR(got[s].logprob, want[s].logprob, kLogprobTol);
    }
  }
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// The same seeded sequences in two batch orders (and twice) give the same tokens.
TEST(CudaSampler, SeededTokensDoNotDependOnBatchPosition) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int rows = 19, vocab = cuda_test::kLargeVocab, tp = 2, steps = 4;
  std::mt19937_64 rng(seed);
  std::vector<HostGathered> logits;
  for (int step = 0; step < steps; ++step) logits.push_back(RandomLogits(rng, tp, rows, vocab));
  std::vector<int> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> shuffled = order;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  const uint64_t seq_seed = rng();

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto sampler = CudaSampler::Create({rows, vocab, 8, 0}, stream);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  // tokens[s][step] of sequence s when the batch is laid out in `perm` order.
  auto run = [&](const std::vector<int>& perm) {
    std::mt19937_64 seq_rng(seq_seed);
    Sequences seqs = MakeSequences(seq_rng, rows, vocab);
    std::vector<std::vector<int32_t>> tokens(rows);
    for (int step = 0; step < steps; ++step) {
      HostGathered g = logits[step];
      HostGathered permuted = g;
      std::vector<SequenceSamplingState*> batch;
      for (int b = 0; b < rows; ++b) {  // batch row b holds sequence perm[b]
        for (int i = 0; i < vocab; ++i) permuted.at(b, i) = g.at(perm[b], i);
        batch.push_back(seqs.gpu[perm[b]].get());
      }
      DeviceCopy device(permuted.bits.data(), permuted.bits.size() * sizeof(uint16_t));
      const Tensor gathered(device.ptr, DType::kBF16, Device::kCuda, {tp, rows, g.shard_vocab});
      const auto got = (*sampler)->Sample(gathered, vocab, batch);
      for (int b = 0; b < rows; ++b) tokens[perm[b]].push_back(got[b].token);
    }
    return tokens;
  };
  const auto in_order = run(order);
  EXPECT_EQ(run(shuffled), in_order);
  EXPECT_EQ(run(order), in_order);
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// The step runner's use: rows of non-final prefill chunks (nullptr) and the
// padding rows of a CUDA-graph batch (past seqs.size()) are not sampled, draw
// nothing from any RNG, and leave the sampled rows as they would be alone.
TEST(CudaSampler, SkippedAndPaddingRowsAreNotSampled) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int tp = 2, layout_rows = 16, rows = 11, vocab = 4097;  // a bucket of 16 holding 11 sequences
  HostGathered g = RandomLogits(rng, tp, layout_rows, vocab);
  Sequences seqs = MakeSequences(rng, rows, vocab);
  std::vector<SequenceSamplingState*> batch = seqs.Ptrs(seqs.gpu);
  for (int s : {0, 4, 10}) batch[s] = nullptr;  // prefill chunks that do not sample

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto sampler = CudaSampler::Create({rows, vocab, 8, 0}, stream);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  DeviceCopy device(g.bits.data(), g.bits.size() * sizeof(uint16_t));
  const Tensor gathered(device.ptr, DType::kBF16, Device::kCuda, {tp, layout_rows, g.shard_vocab});
  const std::vector<SampledToken> got = (*sampler)->Sample(gathered, vocab, batch);
  ASSERT_EQ(got.size(), static_cast<size_t>(rows));
  const std::vector<float> flat = g.Flat();
  for (int s = 0; s < rows; ++s) {
    if (batch[s] == nullptr) {
      EXPECT_EQ(got[s].token, -1) << "row " << s << " was not to be sampled";
      // Its RNG was not advanced: the next draw is the first one.
      EXPECT_EQ(seqs.gpu[s]->NextUniform(), seqs.ref[s]->NextUniform()) << "row " << s;
      continue;
    }
    SequenceSamplingState* ref = seqs.ref[s].get();
    const std::vector<SampledToken> want =
        Sample(std::span<const float>(flat).subspan(static_cast<size_t>(s) * vocab, vocab), vocab, vocab,
               std::span<SequenceSamplingState* const>(&ref, 1));
    EXPECT_EQ(got[s].token, want[0].token) << "row " << s << " (a boundary case is ~1e-6 likely)";
  }
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// The largest vocabulary Create accepts launches: its bitmask plus the
// kernel's static shared arrays fit the 48 KiB a block gets without opting in
// (at 48 · 1024 · 8 tokens they did not, and every launch failed). The emulated
// run checks that limit too (cuda/emu/simt.h).
TEST(CudaSampler, LargestAcceptedVocabularyLaunches) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int tp = 1, rows = 1;
  const int vocab = static_cast<int>(kMaxSampleVocab);
  HostGathered g = RandomLogits(rng, tp, rows, vocab);
  Sequences seqs = MakeSequences(rng, rows, vocab);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto sampler = CudaSampler::Create({rows, vocab, 8, 0}, stream);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  DeviceCopy device(g.bits.data(), g.bits.size() * sizeof(uint16_t));
  const Tensor gathered(device.ptr, DType::kBF16, Device::kCuda, {tp, rows, g.shard_vocab});
  const std::vector<SampledToken> got = (*sampler)->Sample(gathered, vocab, seqs.Ptrs(seqs.gpu));
  const std::vector<float> flat = g.Flat();
  SequenceSamplingState* ref = seqs.ref[0].get();
  const std::vector<SampledToken> want =
      Sample(std::span<const float>(flat), vocab, vocab, std::span<SequenceSamplingState* const>(&ref, 1));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token, want[0].token) << "a boundary case is ~1e-6 likely";
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(CudaSampler, CreateRejectsBadOptions) {
  // No device needed: the options are checked before anything is allocated.
  EXPECT_EQ(CudaSampler::Create({0, 7, 8, 0}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaSampler::Create({4, kMaxSampleVocab + 1, 8, 0}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaSampler::Create({4, 7, -1, 0}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve::cuda
