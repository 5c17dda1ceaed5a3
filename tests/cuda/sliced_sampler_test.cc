// The sliced sampler (cuda/sampling_sliced.cuh) against the row algorithm run
// on the host (RowSampler over SerialBlock, the reference the row kernel is
// held to) on random rows: vocabularies that do not divide by the slices,
// tp 1 and 2 gather layouts, bf16 and f32 logits, heavy ties around every
// cut (crossing slice boundaries), top-k 1 / V / > V, top-p tiny and 1, min-p,
// greedy, temperature extremes, several rows with different parameters in one
// call, NaN-poisoned workspaces (but for the arrival counters, which every
// call must leave zero). Its masses are integers, so its tokens do not
// depend on the plan (how rows are sliced) nor on the run: checked bit for bit.
// The draw is done by whichever block of a row finishes the last stage last:
// the emulated suite runs a second time with blocks in reverse order
// (emu.sliced_sampler_reversed_blocks), so that block is slice 0 there.
// Through CudaSampler: the fast set takes the sliced path at small batch and
// the row kernel otherwise, the reference set never. Runs on a GPU (label gpu)
// and through the SIMT runner (label cuda-emu, smaller sizes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_sampler.h"
#include "cuda/sample_slices.h"
#include "cuda/sampling_sliced.cuh"
#include "model/dtype.h"
#include "sampling/sampler.h"
#include "sampling/sampling_row.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_sizes.h"
#include "tests/testing/seed.h"

namespace tpserve::cuda {
namespace {

using sampling::RowParams;

constexpr double kUniformSlack = 1e-6;

// Logits of `rows` rows in the gather layout [tp, rows, Vs] (padding +inf, never read).
struct Logits {
  int tp, rows, shard_vocab, vocab;
  bool bf16;
  std::vector<uint16_t> bits;  // bf16
  std::vector<float> f32;

  size_t Index(int s, int i) const {
    return (static_cast<size_t>(i / shard_vocab) * rows + s) * shard_vocab + i % shard_vocab;
  }
  void Set(int s, int i, float x) {
    if (bf16) bits[Index(s, i)] = FloatToBf16(x); else f32[Index(s, i)] = x;
  }
  float Get(int s, int i) const { return bf16 ? Bf16ToFloat(bits[Index(s, i)]) : f32[Index(s, i)]; }
  const void* data() const { return bf16 ? static_cast<const void*>(bits.data()) : f32.data(); }
  size_t bytes() const { return bf16 ? bits.size() * 2 : f32.size() * 4; }
};

enum class Shape { kNormal, kFewLevels, kTopTies };
const char* ShapeName(Shape s) {
  return s == Shape::kNormal ? "Normal" : s == Shape::kFewLevels ? "FewLevels" : "TopTies";
}
void PrintTo(Shape s, std::ostream* os) { *os << ShapeName(s); }

// kFewLevels: a handful of values, so every cut falls in a large tie group
// spread over many slices; kTopTies: the best value held by many tokens.
Logits MakeLogits(std::mt19937_64& rng, int tp, int rows, int vocab, bool bf16, Shape shape) {
  Logits g{tp, rows, (vocab + tp - 1) / tp, vocab, bf16, {}, {}};
  const size_t n = static_cast<size_t>(tp) * rows * g.shard_vocab;
  if (bf16) g.bits.assign(n, 0x7f80); else g.f32.assign(n, INFINITY);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int s = 0; s < rows; ++s) {
    for (int i = 0; i < vocab; ++i) {
      float x = normal(rng);
      if (shape == Shape::kFewLevels) x = std::round(x * 0.75f);
      if (shape == Shape::kTopTies && rng() % 8 == 0) x = 7.0f;
      g.Set(s, i, x);
    }
  }
  return g;
}

template <typename T>
int32_t HostToken(const T* data, const Logits& g, int s, const RowParams& p) {
  sampling::SerialBlock block;
  const sampling::GatheredRow<T> row{data + static_cast<size_t>(s) * g.shard_vocab,
                                     static_cast<int64_t>(g.rows) * g.shard_vocab, g.shard_vocab, g.vocab};
  std::vector<uint32_t> seen((g.vocab + 31) / 32);
  int32_t counter = 0;
  // Room for the row's top log-probs however many p asks (a one-entry array was
  // enough for the rows here, but GCC 12 at -O3 cannot see that: -Warray-bounds).
  std::vector<sampling::TopLogprob> top(static_cast<size_t>(std::max<int64_t>(1, p.num_logprobs)));
  sampling::RowSampler<sampling::SerialBlock, T> sampler(block, row, nullptr, 0, p,
                                                         sampling::RowScratch{seen.data(), &counter});
  return sampler.Run(top.data()).token;
}

int32_t HostToken(const Logits& g, int s, const RowParams& p) {
  return g.bf16 ? HostToken(g.bits.data(), g, s, p) : HostToken(g.f32.data(), g, s, p);
}

// Device buffers of one test, freed at exit.
struct DeviceBuffers {
  std::vector<void*> ptrs;
  template <typename T>
  T* Copy(const T* host, size_t count) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(sizeof(T) * count, 1)));
    if (count > 0) CUDA_CHECK(cudaMemcpy(p, host, sizeof(T) * count, cudaMemcpyHostToDevice));
    ptrs.push_back(p);
    return static_cast<T*>(p);
  }
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
  }
};

// How a call is launched: the stages PlanSliceStages picks for the rows, or
// those of stage set `set` when >= 0 (a superset); live < 0: every row is
// live, else the first `live` rows (SlicedSampleArgs::live_rows, device memory).
struct Launch {
  int32_t set = -1;
  int live = -1;
};

// The sliced sampler's tokens for every row of g under `plan`, its workspace
// first filled with 0xff bytes (NaN, -1) so a read of anything it did not
// write shows, but for the arrival counters, zero as the contract asks (and
// checked to be zero again after the call); a row it did not sample keeps
// token -7.
std::vector<int32_t> SlicedTokens(const Logits& g, const std::vector<RowParams>& params, SlicePlan plan,
                                  Launch how = {}) {
  DeviceBuffers buf;
  const int rows = static_cast<int>(params.size());
  std::vector<int32_t> index(rows);
  for (int s = 0; s < rows; ++s) index[s] = s;
  SlicedSampleArgs a;
  a.gathered = buf.Copy(static_cast<const char*>(g.data()), g.bytes());
  a.bf16 = g.bf16;
  a.rows = rows;
  a.layout_rows = g.rows;
  a.row_index = buf.Copy(index.data(), index.size());
  a.shard_vocab = g.shard_vocab;
  a.vocab = g.vocab;
  a.params = buf.Copy(params.data(), params.size());
  a.plan = plan;
  a.stages = how.set >= 0 ? SliceStagesOf(how.set) : PlanSliceStages(params.data(), rows, g.vocab);
  if (how.live >= 0) a.live_rows = buf.Copy(&how.live, 1);
  a.workspace_bytes = SlicedSampleWorkspaceBytes(rows, plan.slices);
  std::vector<char> poison(a.workspace_bytes, static_cast<char>(0xff));
  const size_t counter_bytes = SlicedSampleCounterBytes(rows);
  std::fill(poison.begin(), poison.begin() + static_cast<std::ptrdiff_t>(counter_bytes), char{0});
  a.workspace = buf.Copy(poison.data(), poison.size());
  std::vector<sampling::RowResult> results(rows, sampling::RowResult{-7, 0, 0});
  a.results = buf.Copy(results.data(), results.size());
  EXPECT_EQ(LaunchSlicedSample(a, nullptr), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  CUDA_CHECK(cudaMemcpy(results.data(), a.results, sizeof(results[0]) * rows, cudaMemcpyDeviceToHost));
  std::vector<char> counters(counter_bytes);
  CUDA_CHECK(cudaMemcpy(counters.data(), a.workspace, counter_bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(counters, std::vector<char>(counter_bytes, 0)) << "the call leaves every arrival counter zero";
  std::vector<int32_t> tokens;
  for (const auto& r : results) tokens.push_back(r.token);
  return tokens;
}

// A plan of slices of `slice_size` ids (a multiple of 32).
SlicePlan PlanOf(int vocab, int slice_size) {
  return SlicePlan{static_cast<int32_t>((vocab + slice_size - 1) / slice_size), slice_size};
}

std::vector<RowParams> ParamCases(std::mt19937_64& rng, int vocab) {
  std::vector<RowParams> cases;
  auto add = [&](float t, int32_t k, float top_p, float min_p) {
    RowParams p;
    p.temperature = t, p.top_k = k, p.top_p = top_p, p.min_p = min_p;
    cases.push_back(p);
  };
  add(0.0f, -1, 1.0f, 0.0f);        // greedy
  add(0.0f, 5, 0.5f, 0.1f);         // greedy, filters ignored
  add(1.0f, -1, 1.0f, 0.0f);        // temperature only
  add(0.7f, -1, 0.9f, 0.0f);        // the issue-12 case: temperature + top-p
  add(1.0f, -1, 1e-6f, 0.0f);       // top-p tiny: the best token (or its ties)
  add(1.0f, -1, 1.0f, 0.05f);       // min-p
  add(1.0f, 1, 1.0f, 0.0f);         // top-k 1
  add(1.0f, vocab, 1.0f, 0.0f);     // top-k = V: off
  add(1.0f, vocab + 5, 0.8f, 0.0f); // top-k > V: off
  add(0.8f, 40, 0.95f, 0.02f);      // all filters
  add(1.2f, 333, 0.6f, 0.0f);       // top-k then top-p
  add(1e-5f, -1, 0.9f, 0.0f);       // the smallest sampled temperature
  add(100.0f, 50, 0.3f, 0.0f);      // nearly flat
  add(0.5f, vocab / 3, 1.0f, 0.3f); // min-p narrower than top-k
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (RowParams& p : cases) p.uniform = uniform(rng);
  return cases;
}

// Every row of g sampled by the sliced path under several plans: the same
// tokens under every plan and run, and the row algorithm's (within kUniformSlack of u).
void CheckRows(const Logits& g, const std::vector<RowParams>& params, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<int32_t> first = SlicedTokens(g, params, PlanOf(g.vocab, 32));
  // Emulated blocks run one at a time on the CPU, so the emulated run tries
  // fewer plans (and no second run, which only a GPU's atomics could vary).
  const std::vector<int> others = cuda_test::kEmulated ? std::vector<int>{256} : std::vector<int>{96, 1024, 4096};
  for (int slice_size : others) {
    EXPECT_EQ(SlicedTokens(g, params, PlanOf(g.vocab, slice_size)), first) << "slice size " << slice_size;
  }
  if (!cuda_test::kEmulated) {
    EXPECT_EQ(SlicedTokens(g, params, PlanOf(g.vocab, 32)), first) << "second run";
  }
  for (size_t s = 0; s < params.size(); ++s) {
    const RowParams& p = params[s];
    const int32_t want = HostToken(g, static_cast<int>(s), p);
    if (first[s] == want) continue;
    RowParams lower = p, upper = p;
    lower.uniform = std::max(0.0, p.uniform - kUniformSlack);
    upper.uniform = std::min(1.0, p.uniform + kUniformSlack);
    const int32_t near[] = {HostToken(g, static_cast<int>(s), lower), HostToken(g, static_cast<int>(s), upper)};
    EXPECT_TRUE(first[s] == near[0] || first[s] == near[1])
        << "row " << s << " (T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p << " min_p "
        << p.min_p << " u " << p.uniform << "): sliced " << first[s] << ", row algorithm " << want
        << " (" << near[0] << " / " << near[1] << " within " << kUniformSlack << ")";
  }
}

class SlicedSamplerTest : public ::testing::TestWithParam<Shape> {};

TEST_P(SlicedSamplerTest, MatchesTheRowAlgorithmUnderEveryPlan) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct Case {
    int tp, vocab;
    bool bf16;
  };
  // Emulated: two odd vocabularies (17 and 19 slices of 32 ids, the last short),
  // each layout and dtype once. On a GPU: every combination, up to Qwen's vocabulary.
  std::vector<Case> cases = {{1, 517, true}, {2, 601, false}};
  if (!cuda_test::kEmulated) {
    cases.clear();
    for (int tp : {1, 2}) {
      for (int vocab : {1031, 151936}) {
        for (bool bf16 : {true, false}) cases.push_back({tp, vocab, bf16});
      }
    }
  }
  for (const Case& c : cases) {
    const std::vector<RowParams> params = ParamCases(rng, c.vocab);
    const int rows = static_cast<int>(params.size());
    const Logits g = MakeLogits(rng, c.tp, rows, c.vocab, c.bf16, GetParam());
    CheckRows(g, params, "tp=" + std::to_string(c.tp) + " V=" + std::to_string(c.vocab) + (c.bf16 ? " bf16" : " f32"));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SlicedSamplerTest,
                         ::testing::Values(Shape::kNormal, Shape::kFewLevels, Shape::kTopTies),
                         [](const ::testing::TestParamInfo<Shape>& info) { return std::string(ShapeName(info.param)); });

// Any superset of the planned stages (a larger stage set) samples the rows
// as the planned stages do: each stage skips, on the device, the rows it does
// not concern (the decode-batch graphs rely on this for mixed rows). Rows
// past live_rows (a bucket's padding) are not sampled: their results keep
// what was there.
TEST(SlicedSampler, LargerStageSetsAndPaddingRowsMatchThePlannedStages) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int vocab = cuda_test::kEmulated ? 517 : 151936;
  const std::vector<RowParams> all = ParamCases(rng, vocab);
  // The emulated run: the rows of the smallest set with each stage (greedy,
  // temperature + top-p, top-k + mass) under every stage.
  const std::vector<int32_t> sets = cuda_test::kEmulated ? std::vector<int32_t>{0, kStageSetTopP, kStageSetTopK | kStageSetMass}
                                                         : std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6};
  for (const int32_t set : sets) {
    std::vector<RowParams> params;  // rows whose own stage set is within `set`
    for (const RowParams& p : all) {
      if ((PlanSliceStageSet(&p, 1, vocab) & ~set) == 0) params.push_back(p);
    }
    const int rows = static_cast<int>(params.size());
    SCOPED_TRACE("stage set " + std::to_string(set) + ": " + std::to_string(rows) + " rows");
    ASSERT_GE(rows, 2);
    const Logits g = MakeLogits(rng, 2, rows, vocab, true, Shape::kFewLevels);
    const SlicePlan plan = PlanOf(vocab, cuda_test::kEmulated ? 64 : 1024);
    const std::vector<int32_t> planned = SlicedTokens(g, params, plan);
    EXPECT_EQ(SlicedTokens(g, params, plan, Launch{kSliceStageSets - 1, -1}), planned) << "every stage";
    const int live = rows > 3 ? rows - 3 : 1;
    const std::vector<int32_t> padded = SlicedTokens(g, params, plan, Launch{set, live});
    for (int s = 0; s < rows; ++s) {
      EXPECT_EQ(padded[s], s < live ? planned[s] : -7) << "row " << s << " of " << live << " live";
    }
    EXPECT_EQ(SlicedTokens(g, params, plan, Launch{set, 0}), std::vector<int32_t>(rows, -7));
  }
}

TEST(SlicedSampler, StageSetsArePlannedFromTheRows) {
  RowParams greedy, temperature, top_p, top_k, both;
  greedy.temperature = 0, greedy.top_k = 5, greedy.top_p = 0.5f;  // greedy: filters ignored
  top_p.top_p = 0.9f;
  top_k.top_k = 40;
  both.top_k = 50, both.top_p = 0.95f;
  const std::pair<RowParams, int32_t> cases[] = {{greedy, 0},
                                                 {temperature, kStageSetMass},
                                                 {top_p, kStageSetTopP},
                                                 {top_k, kStageSetTopK | kStageSetMass},
                                                 {both, kStageSetTopK | kStageSetTopP}};
  const int32_t launches[] = {1, 2, 4, 5, 7};  // SliceStagesOf(set).count, in the order above
  for (size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(PlanSliceStageSet(&cases[i].first, 1, 1000), cases[i].second) << "case " << i;
    EXPECT_EQ(PlanSliceStages(&cases[i].first, 1, 1000).count, launches[i]) << "case " << i;
  }
  const RowParams mixed[] = {greedy, top_p, top_k};
  EXPECT_EQ(PlanSliceStageSet(mixed, 3, 1000), kSliceStageSets - 1);
  EXPECT_EQ(SliceStagesOf(kSliceStageSets - 1).count, kMaxSliceStages);
  top_k.top_k = 1000;  // = V: off
  EXPECT_EQ(PlanSliceStageSet(&top_k, 1, 1000), kStageSetMass);
}

// Random parameters, many draws per row: the inverse CDF lands in every slice.
TEST(SlicedSampler, RandomParametersAndUniforms) {
  TPSERVE_REQUIRE_GPU();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int vocab = cuda_test::kEmulated ? 703 : 1999, rows = cuda_test::kEmulated ? 12 : 48;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<RowParams> params(rows);
  for (RowParams& p : params) {
    p.temperature = static_cast<float>(0.3 + 2.0 * uniform(rng));
    p.top_k = rng() % 3 == 0 ? static_cast<int32_t>(1 + rng() % vocab) : -1;
    p.top_p = rng() % 2 == 0 ? static_cast<float>(0.05 + 0.95 * uniform(rng)) : 1.0f;
    p.min_p = rng() % 4 == 0 ? static_cast<float>(0.2 * uniform(rng)) : 0.0f;
    p.uniform = uniform(rng);
  }
  const Logits g = MakeLogits(rng, 1, rows, vocab, true, Shape::kFewLevels);
  CheckRows(g, params, "random");
}

// Arguments for one row of a 100-token vocabulary under `plan`, every
// pointer set (to host memory: the launcher refuses them before any launch).
struct OneRowArgs {
  int32_t dummy = 0;
  RowParams p;
  sampling::RowResult r{};
  SlicedSampleArgs a;
  explicit OneRowArgs(SlicePlan plan) {
    a.rows = 1;
    a.layout_rows = 1;
    a.vocab = 100;
    a.shard_vocab = 100;
    a.row_index = &dummy;
    a.params = &p;
    a.results = &r;
    a.workspace = &dummy;
    a.plan = plan;
    a.stages = PlanSliceStages(&p, 1, a.vocab);
    a.workspace_bytes = SlicedSampleWorkspaceBytes(1, plan.slices);
  }
  OneRowArgs(const OneRowArgs&) = delete;  // `a` points into this object
  OneRowArgs& operator=(const OneRowArgs&) = delete;
};

TEST(SlicedSampler, RejectsPlansThatDoNotCoverTheVocabulary) {
  OneRowArgs args(SlicePlan{2, 32});  // 64 ids < 100
  SlicedSampleArgs& a = args.a;
  EXPECT_EQ(LaunchSlicedSample(a, nullptr), cudaErrorInvalidValue);
  a.plan = SlicePlan{5, 32};  // a slice past the vocabulary
  EXPECT_EQ(LaunchSlicedSample(a, nullptr), cudaErrorInvalidValue);
}

// A stage list must be one SliceStagesOf could give: stats first, then
// stages in order (the last one draws). Rejected before anything launches.
TEST(SlicedSampler, RejectsStageListsOutOfOrder) {
  OneRowArgs args(SlicePlan{4, 32});
  SlicedSampleArgs& a = args.a;
  a.stages = SliceStages{};  // none
  EXPECT_EQ(LaunchSlicedSample(a, nullptr), cudaErrorInvalidValue);
  a.stages = SliceStages{2, {SliceStage::kMass, SliceStage::kStats}};  // stats not first
  EXPECT_EQ(LaunchSlicedSample(a, nullptr), cudaErrorInvalidValue);
  a.stages = SliceStages{3, {SliceStage::kStats, SliceStage::kMass, SliceStage::kTopP0}};  // top-p after mass
  EXPECT_EQ(LaunchSlicedSample(a, nullptr), cudaErrorInvalidValue);
  a.stages = SliceStages{3, {SliceStage::kStats, SliceStage::kTopP0, SliceStage::kTopP0}};  // a stage twice
  EXPECT_EQ(LaunchSlicedSample(a, nullptr), cudaErrorInvalidValue);
  a.stages = SliceStagesOf(kStageSetTopP);
  a.stages.count = kMaxSliceStages + 1;  // more than there are
  EXPECT_EQ(LaunchSlicedSample(a, nullptr), cudaErrorInvalidValue);
}

// The host sampler's tokens through CudaSampler, and which path ran.
void SampleThroughCudaSampler(KernelSet kernels, int rows, bool penalties, int64_t expect_sliced_calls) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed) + " kernels=" + std::string(KernelSetName(kernels)) +
               " rows=" + std::to_string(rows));
  std::mt19937_64 rng(seed);
  const int vocab = 4097, tp = 2;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CudaSampler::Options options;
  options.max_seqs = rows;
  options.vocab_size = vocab;
  options.kernels = kernels;
  options.sm_count = 132;
  auto sampler = CudaSampler::Create(options, stream);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  std::vector<std::unique_ptr<SequenceSamplingState>> gpu, ref;
  for (int s = 0; s < rows; ++s) {
    SamplingParams p;
    p.temperature = 0.8f, p.top_p = 0.9f, p.top_k = s % 2 == 0 ? 50 : -1, p.seed = rng();
    if (penalties) p.repetition_penalty = 1.3f;
    const std::vector<int32_t> prompt = {1, 2, 3}, output;
    gpu.push_back(std::make_unique<SequenceSamplingState>(p, prompt, output));
    ref.push_back(std::make_unique<SequenceSamplingState>(p, prompt, output));
  }
  std::vector<SequenceSamplingState*> gp, rp;
  for (int s = 0; s < rows; ++s) gp.push_back(gpu[s].get()), rp.push_back(ref[s].get());
  const Logits g = MakeLogits(rng, tp, rows, vocab, true, Shape::kNormal);
  std::vector<float> flat(static_cast<size_t>(rows) * vocab);
  for (int s = 0; s < rows; ++s) {
    for (int i = 0; i < vocab; ++i) flat[static_cast<size_t>(s) * vocab + i] = g.Get(s, i);
  }
  DeviceBuffers buf;
  const Tensor gathered(buf.Copy(g.bits.data(), g.bits.size()), DType::kBF16, Device::kCuda,
                        {tp, rows, g.shard_vocab});
  const auto got = (*sampler)->Sample(gathered, vocab, gp);
  const auto want = Sample(flat, vocab, vocab, rp);
  for (int s = 0; s < rows; ++s) EXPECT_EQ(got[s].token, want[s].token) << "row " << s << " (a boundary case is ~1e-6 likely)";
  EXPECT_EQ((*sampler)->sliced_calls(), expect_sliced_calls);
  sampler->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(SlicedSampler, CudaSamplerTakesTheSlicedPathOnlyWhereItCovers) {
  TPSERVE_REQUIRE_GPU();
  SampleThroughCudaSampler(KernelSet::kFast, 2, false, 1);       // small batch: sliced
  SampleThroughCudaSampler(KernelSet::kReference, 2, false, 0);  // the reference set: the row kernel
  SampleThroughCudaSampler(KernelSet::kFast, 2, true, 0);        // penalty entries: the row kernel
}

// Sequences of mixed parameters (greedy, temperature, its extremes, top-k,
// top-p, min-p, all filters), seeded; `extra` adds to row 0 what the sliced
// path does not cover.
std::vector<std::unique_ptr<SequenceSamplingState>> MixedSequences(uint64_t seed, int rows,
                                                                   const SamplingParams* extra = nullptr) {
  std::vector<SamplingParams> sets(7);
  sets[0].temperature = 0;
  sets[1].temperature = 0.7f, sets[1].top_p = 0.9f;
  sets[2].top_k = 40;
  sets[3].min_p = 0.05f;
  sets[4].temperature = 1e-5f, sets[4].top_p = 0.5f;
  sets[5].temperature = 100.0f;
  sets[6].temperature = 0.8f, sets[6].min_p = 0.02f, sets[6].top_k = 50, sets[6].top_p = 0.95f;
  std::vector<std::unique_ptr<SequenceSamplingState>> seqs;
  for (int s = 0; s < rows; ++s) {
    SamplingParams p = s == 0 && extra != nullptr ? *extra : sets[(seed + s) % sets.size()];
    p.seed = seed * 1000 + s;
    seqs.push_back(std::make_unique<SequenceSamplingState>(p, std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{}));
  }
  return seqs;
}

std::vector<SequenceSamplingState*> Ptrs(const std::vector<std::unique_ptr<SequenceSamplingState>>& v) {
  std::vector<SequenceSamplingState*> p;
  for (const auto& q : v) p.push_back(q.get());
  return p;
}

// The decode-batch graphs (CudaSampler::PrepareBatch): at buckets of B rows
// holding n <= B sequences, steps of fresh logits in the bucket's fixed buffer
// sample through the graph the tokens the eager sampler and the host sampler
// give the same seeds; rows past n are padding. A step with a row the sliced
// path does not cover (penalties, log-probs) falls back to the eager path.
void GraphSteps(int bucket, int live, const SamplingParams* extra, bool expect_graph) {
  const uint64_t seed = testing_util::TestSeed() + static_cast<uint64_t>(bucket * 100 + live);
  SCOPED_TRACE("seed=" + std::to_string(seed) + " bucket=" + std::to_string(bucket) + " live=" +
               std::to_string(live) + (extra != nullptr ? " with a row the sliced path does not cover" : ""));
  std::mt19937_64 rng(seed);
  const int vocab = 4097, tp = 2;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CudaSampler::Options options;
  options.max_seqs = 16;
  options.vocab_size = vocab;
  options.max_logprobs = 4;
  options.sm_count = 132;
  auto graphed = CudaSampler::Create(options, stream);
  auto eager = CudaSampler::Create(options, stream);
  ASSERT_TRUE(graphed.ok() && eager.ok()) << graphed.status() << eager.status();
  Logits g = MakeLogits(rng, tp, bucket, vocab, true, Shape::kNormal);
  DeviceBuffers buf;
  const Tensor gathered(buf.Copy(g.bits.data(), g.bits.size()), DType::kBF16, Device::kCuda,
                        {tp, bucket, g.shard_vocab});
  const absl::Status prepared = (*graphed)->PrepareBatch(gathered, vocab);
  ASSERT_TRUE(prepared.ok()) << prepared;
  EXPECT_EQ((*graphed)->prepared_batches(), 1);
  ASSERT_TRUE((*graphed)->PrepareBatch(gathered, vocab).ok());  // again (a recapture): nothing new
  EXPECT_EQ((*graphed)->prepared_batches(), 1);
  auto via_graph = MixedSequences(seed, live, extra), via_eager = MixedSequences(seed, live, extra),
       via_host = MixedSequences(seed, live, extra);
  const int steps = 3;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    if (step > 0) {  // fresh logits in the same device buffer
      g = MakeLogits(rng, tp, bucket, vocab, true, Shape::kNormal);
      CUDA_CHECK(cudaMemcpy(gathered.data, g.bits.data(), g.bits.size() * 2, cudaMemcpyHostToDevice));
    }
    std::vector<float> flat(static_cast<size_t>(live) * vocab);
    for (int s = 0; s < live; ++s) {
      for (int i = 0; i < vocab; ++i) flat[static_cast<size_t>(s) * vocab + i] = g.Get(s, i);
    }
    const auto got = (*graphed)->Sample(gathered, vocab, Ptrs(via_graph));
    const auto want_eager = (*eager)->Sample(gathered, vocab, Ptrs(via_eager));
    const auto want_host = Sample(flat, vocab, vocab, Ptrs(via_host));
    ASSERT_EQ(got.size(), static_cast<size_t>(live));
    for (int s = 0; s < live; ++s) {
      EXPECT_EQ(got[s].token, want_eager[s].token) << "row " << s;
      EXPECT_EQ(got[s].token, want_host[s].token) << "row " << s << " (a boundary case is ~1e-6 likely)";
      EXPECT_EQ(got[s].top.size(), want_host[s].top.size()) << "row " << s;
    }
  }
  EXPECT_EQ((*graphed)->graph_calls(), expect_graph ? steps : 0);
  graphed->reset();
  eager->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(SlicedSampler, CudaSamplerGraphMatchesEagerAndHostAtEveryBucket) {
  TPSERVE_REQUIRE_GPU();
  for (const auto& [bucket, live] : std::vector<std::pair<int, int>>{{1, 1}, {4, 3}, {8, 5}, {16, 16}}) {
    GraphSteps(bucket, live, nullptr, true);
  }
}

TEST(SlicedSampler, CudaSamplerGraphFallsBackForPenaltiesAndLogprobs) {
  TPSERVE_REQUIRE_GPU();
  SamplingParams penalised;
  penalised.temperature = 0.9f, penalised.repetition_penalty = 1.3f, penalised.frequency_penalty = 0.5f;
  GraphSteps(4, 3, &penalised, false);
  SamplingParams logprobs;
  logprobs.top_p = 0.8f, logprobs.logprobs = 3;
  GraphSteps(4, 3, &logprobs, false);
}

// Layouts the sliced path does not take (more rows than SlicedRowsCap), and
// any layout with batch_graphs off, get no graph: Sample stays eager.
TEST(SlicedSampler, CudaSamplerPreparesNoGraphWhereTheSlicedPathDoesNotRun) {
  TPSERVE_REQUIRE_GPU();
  const int vocab = 4097, rows = 4;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::vector<uint16_t> bits(static_cast<size_t>(rows) * vocab, FloatToBf16(0.5f));
  DeviceBuffers buf;
  const Tensor gathered(buf.Copy(bits.data(), bits.size()), DType::kBF16, Device::kCuda, {1, rows, vocab});
  for (const bool graphs : {true, false}) {
    CudaSampler::Options options;
    options.max_seqs = rows;
    options.vocab_size = vocab;
    options.sm_count = graphs ? 1 : 132;  // 1 SM: only a single row gets two slices
    options.batch_graphs = graphs;
    auto sampler = CudaSampler::Create(options, stream);
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    EXPECT_LT((*sampler)->SlicedRowsCap(), graphs ? rows : rows + 1);
    ASSERT_TRUE((*sampler)->PrepareBatch(gathered, vocab).ok());
    EXPECT_EQ((*sampler)->prepared_batches(), 0) << "batch_graphs " << graphs;
    auto seqs = MixedSequences(5, rows);
    const auto got = (*sampler)->Sample(gathered, vocab, Ptrs(seqs));
    for (const SampledToken& t : got) EXPECT_TRUE(t.token >= 0 && t.token < vocab);
    EXPECT_EQ((*sampler)->graph_calls(), 0);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(SlicedSampler, CudaSamplerCapsTheSlicedRows) {
  TPSERVE_REQUIRE_GPU();
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CudaSampler::Options options;
  options.max_seqs = 300;
  options.vocab_size = 151936;
  options.sm_count = 132;
  auto fast = CudaSampler::Create(options, stream);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ((*fast)->SlicedRowsCap(), SliceTargetBlocks(132) / 2);  // the rows that still get two slices
  options.kernels = KernelSet::kReference;
  auto reference = CudaSampler::Create(options, stream);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ((*reference)->SlicedRowsCap(), 0);
  fast->reset();
  reference->reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace tpserve::cuda
