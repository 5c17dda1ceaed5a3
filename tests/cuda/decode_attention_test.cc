// The fast paged decode attention (cuda/decode_attention.cuh) against the
// reference kernels (cuda/attention.cuh) and the CPU backend:
//   * the launcher, for hand-picked plans (one split; partitions of 100 and 32
//     keys, so partition boundaries fall inside blocks of 16 and 32 and blocks
//     loop over several partitions), the host's plan for the step, and a plan
//     fixed for a context several times longer than the step's (a CUDA graph
//     captured at the reserved capacity, replayed with short contexts):
//     every decode row against the reference kernel; rows before first_token
//     untouched; outputs and workspace NaN-poisoned first; the arrival
//     counters of the in-kernel merge back at zero after every launch;
//   * the backend's Attention op under KernelSet::kFast (decode rows through
//     the fast kernel, prefill rows through the tensor-core prefill kernel)
//     after Reserve and without it, against KernelSet::kReference and the CPU
//     backend, on decode-only and mixed prefill + decode steps; and batch-1
//     decode captured into a CUDA graph once and replayed at contexts from 1
//     key up (the served path's fixed grid of small partitions), against the
//     reference set run eagerly.
//   * for groups 4 and 8 (head_dim 64, 128) both kernels: the tensor-core one
//     the launcher chooses and the SIMT one, forced; and that the launcher runs
//     the variant FastDecodeVariant names for each shape;
// head_dim 64 and 128, GQA groups 1, 2, 4, 8, block sizes 16 and 32, contexts
// 1 .. kLongContext across partition and page boundaries, and up to 32,768 on
// a GPU. Skips without a GPU; runs again through the SIMT emulator (tests/cuda_emu/) at small sizes.
// Replay a failure with TPSERVE_TEST_SEED=<the printed seed>.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "cuda/attention.cuh"
#include "cuda/cuda_backend.h"
#include "cuda/decode_attention.cuh"
#include "cuda/decode_plan.h"
#include "cuda/kernel_set.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_sizes.h"

namespace tpserve {
namespace {

using cuda_test::DealBlocks;
using cuda_test::DeviceArray;
using cuda_test::Download;
using cuda_test::ExpectClose;
using cuda_test::FromBf16;
using cuda_test::Output;
using cuda_test::RandomBf16;
using cuda_test::RandomStep;
using cuda_test::RelL2;
using cuda_test::SeqPart;
using cuda_test::ToBf16;
using cuda_test::Upload;

constexpr double kTol = 1e-2;
constexpr int kH200Sms = 132;

// Contexts around the 32-key granule, the 256-key minimum partition, pages of
// 16 and 32, and one long context.
const std::vector<int32_t> kContexts = {1, 2, 17, 32, 33, 255, 256, 257, cuda_test::kLongContext};

struct Geometry {
  int hq, hkv, hd, block_size;
};

std::string Describe(const Geometry& g) {
  return "Hq=" + std::to_string(g.hq) + " Hkv=" + std::to_string(g.hkv) + " hd=" + std::to_string(g.hd) +
         " block_size=" + std::to_string(g.block_size);
}

void PrintTo(const Geometry& g, std::ostream* os) { *os << Describe(g); }

// Every covered group size and head dim, both page sizes between them; the
// tensor-core groups (4 and 8) with both head dims and both page sizes each.
const Geometry kGeometries[] = {{2, 2, 64, 16},  {4, 2, 128, 32}, {8, 2, 64, 32},  {8, 1, 128, 16},
                                {1, 1, 128, 16}, {16, 2, 64, 16}, {8, 2, 128, 16}, {16, 2, 128, 32}};

// The variants instantiated for g (the chosen one first).
std::vector<cuda::DecodeVariant> VariantsOf(const Geometry& g) {
  const int group = g.hq / g.hkv;
  const cuda::DecodeVariant chosen = cuda::FastDecodeVariant(g.hd, group);
  std::vector<cuda::DecodeVariant> all = {chosen};
  for (cuda::DecodeVariant v : {cuda::DecodeVariant::kSimt, cuda::DecodeVariant::kMma}) {
    if (v != chosen && cuda::FastDecodeHasVariant(v, g.hd, group)) all.push_back(v);
  }
  return all;
}

class DecodeAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
    seed_ = cuda_test::TestSeed();
    rng_.seed(seed_);
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

#define SEED_TRACE() SCOPED_TRACE(::testing::Message() << "TPSERVE_TEST_SEED=" << seed_)

// ---- the launcher ----

constexpr int kLead = 2;  // rows of the caller's prefill: the launcher must not write them

// The inputs of one launcher case on the device: decode i (row kLead + i) has
// context contexts[i]; the lead rows borrow sequence 0 at position 0.
struct LauncherCase {
  Geometry g;
  int T = 0;
  int64_t out_width = 0;
  std::unique_ptr<DeviceArray<uint16_t>> qkv, k, v;
  std::unique_ptr<DeviceArray<int32_t>> seq, pos, tables;
  cuda::PagedAttentionArgs args;
};

void Prepare(LauncherCase& c, const std::vector<int32_t>& contexts, std::mt19937& rng) {
  const Geometry& g = c.g;
  const int n = static_cast<int>(contexts.size());
  c.T = kLead + n;
  const int64_t width = int64_t{g.hq + 2 * g.hkv} * g.hd;
  c.out_width = int64_t{g.hq} * g.hd;
  int64_t num_blocks = 3;  // unused blocks hold garbage nobody may read
  for (int32_t len : contexts) num_blocks += (len + g.block_size - 1) / g.block_size;
  const auto blocks_of = DealBlocks(contexts, g.block_size, num_blocks, rng);
  int32_t max_blocks = 1;
  for (const auto& b : blocks_of) max_blocks = std::max(max_blocks, static_cast<int32_t>(b.size()));
  std::vector<int32_t> tables, token_seq(static_cast<size_t>(c.T)), positions(static_cast<size_t>(c.T));
  for (const auto& b : blocks_of) {
    std::vector<int32_t> row = b;
    row.resize(static_cast<size_t>(max_blocks), -1);
    tables.insert(tables.end(), row.begin(), row.end());
  }
  for (int t = 0; t < c.T; ++t) {
    token_seq[static_cast<size_t>(t)] = t < kLead ? 0 : t - kLead;
    positions[static_cast<size_t>(t)] = t < kLead ? 0 : contexts[static_cast<size_t>(t - kLead)] - 1;
  }
  const int64_t cache = num_blocks * g.block_size * g.hkv * g.hd;
  c.qkv = std::make_unique<DeviceArray<uint16_t>>(static_cast<size_t>(c.T * width));
  c.k = std::make_unique<DeviceArray<uint16_t>>(static_cast<size_t>(cache));
  c.v = std::make_unique<DeviceArray<uint16_t>>(static_cast<size_t>(cache));
  c.seq = std::make_unique<DeviceArray<int32_t>>(token_seq.size());
  c.pos = std::make_unique<DeviceArray<int32_t>>(positions.size());
  c.tables = std::make_unique<DeviceArray<int32_t>>(tables.size());
  c.qkv->Upload(ToBf16(RandomBf16(rng, c.T * width)));
  c.k->Upload(ToBf16(RandomBf16(rng, cache)));
  c.v->Upload(ToBf16(RandomBf16(rng, cache)));
  c.seq->Upload(token_seq);
  c.pos->Upload(positions);
  c.tables->Upload(tables);
  cuda::PagedAttentionArgs& a = c.args;
  a.qkv = reinterpret_cast<const __nv_bfloat16*>(c.qkv->ptr);
  a.num_tokens = c.T;
  a.token_seq = c.seq->ptr;
  a.positions = c.pos->ptr;
  a.block_tables = c.tables->ptr;
  a.max_blocks_per_seq = max_blocks;
  a.block_size = g.block_size;
  a.num_heads = g.hq;
  a.num_kv_heads = g.hkv;
  a.head_dim = g.hd;
  a.scale = 1.f / std::sqrt(static_cast<float>(g.hd));
  a.k_cache = reinterpret_cast<const __nv_bfloat16*>(c.k->ptr);
  a.v_cache = reinterpret_cast<const __nv_bfloat16*>(c.v->ptr);
}

// The decode rows of the reference kernel (single kernel over every row).
std::vector<float> ReferenceRows(LauncherCase& c) {
  DeviceArray<uint16_t> out(static_cast<size_t>(c.T * c.out_width));
  out.Poison();
  cuda::PagedAttentionArgs a = c.args;
  a.out = reinterpret_cast<__nv_bfloat16*>(out.ptr);
  EXPECT_EQ(cuda::LaunchPagedAttention(a, nullptr), cudaSuccess);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> all = FromBf16(out.Download());
  return std::vector<float>(all.begin() + kLead * c.out_width, all.end());
}

// The fast launcher with `plan` (the variant forced when `variant` is set),
// against `want` row by row; the raw bf16 output of the decode rows.
std::vector<uint16_t> ExpectFastMatches(LauncherCase& c, const cuda::DecodePlan& plan,
                                        const std::vector<float>& want, const std::vector<int32_t>& contexts,
                                        const std::string& what,
                                        std::optional<cuda::DecodeVariant> variant = std::nullopt) {
  const int n = c.T - kLead;
  const size_t floats = cuda::FastDecodeWorkspaceFloats(n, c.g.hq, c.g.hd, plan);
  DeviceArray<float> ws(floats);
  ws.Poison();  // a partial the last block merges but nobody wrote would give NaN
  DeviceArray<uint32_t> arrivals(static_cast<size_t>(n * c.g.hkv));
  arrivals.Upload(std::vector<uint32_t>(arrivals.n, 0));
  DeviceArray<uint16_t> out(static_cast<size_t>(c.T * c.out_width));
  out.Poison();
  cuda::PagedAttentionArgs a = c.args;
  a.out = reinterpret_cast<__nv_bfloat16*>(out.ptr);
  const auto launch = [&](float* w, size_t n, uint32_t* counters) {
    return variant ? cuda::LaunchFastDecodeAttention(*variant, a, kLead, plan, w, n, counters, nullptr)
                   : cuda::LaunchFastDecodeAttention(a, kLead, plan, w, n, counters, nullptr);
  };
  if (floats > 0) {
    EXPECT_EQ(launch(ws.ptr, floats - 1, arrivals.ptr), cudaErrorInvalidValue) << what << ": a workspace one float short";
    EXPECT_EQ(launch(ws.ptr, floats, nullptr), cudaErrorInvalidValue) << what << ": no arrival counters";
  }
  const cudaError_t err = launch(floats > 0 ? ws.ptr : nullptr, floats, floats > 0 ? arrivals.ptr : nullptr);
  EXPECT_EQ(err, cudaSuccess) << what;
  if (err != cudaSuccess) return {};
  CUDA_CHECK(cudaDeviceSynchronize());
  for (uint32_t counter : arrivals.Download()) {  // ready for the next launch or replay
    EXPECT_EQ(counter, 0u) << what << ": an arrival counter was left at " << counter;
  }
  const std::vector<uint16_t> raw = out.Download();
  for (int64_t e = 0; e < kLead * c.out_width; ++e) {
    EXPECT_EQ(raw[static_cast<size_t>(e)], 0xffff) << what << ": row " << e / c.out_width << " before first_token was written";
    if (raw[static_cast<size_t>(e)] != 0xffff) return {};
  }
  const std::vector<float> all = FromBf16(raw);
  const std::vector<float> got(all.begin() + kLead * c.out_width, all.end());
  ExpectClose(got, want, kTol, "fast vs reference kernel, " + what);
  for (int i = 0; i < n; ++i) {  // each context on its own, so a short one is not hidden by a long one
    const std::vector<float> gi(got.begin() + i * c.out_width, got.begin() + (i + 1) * c.out_width);
    const std::vector<float> wi(want.begin() + i * c.out_width, want.begin() + (i + 1) * c.out_width);
    EXPECT_LE(RelL2(gi, wi), kTol) << what << " context " << contexts[static_cast<size_t>(i)];
  }
  return std::vector<uint16_t>(raw.begin() + kLead * c.out_width, raw.end());
}

TEST_F(DecodeAttentionTest, LauncherMatchesReferenceKernelForEveryKindOfPlan) {
  SEED_TRACE();
  for (const Geometry& g : kGeometries) {
    LauncherCase c;
    c.g = g;
    Prepare(c, kContexts, rng_);
    ASSERT_TRUE(cuda::FastDecodeCovers(c.args)) << Describe(g);
    const std::vector<float> want = ReferenceRows(c);
    const int n = static_cast<int>(kContexts.size());
    const int64_t longest = *std::max_element(kContexts.begin(), kContexts.end());
    const cuda::DecodePlan plans[] = {
        {1, 256},  // one block per (token, KV head) over every partition: no combine
        {3, 100},  // partition boundaries inside pages; blocks loop over several partitions
        {7, 32},
        cuda::PlanDecode({n, g.hkv, longest, kH200Sms, false}),  // this step's plan
        // A grid fixed for a context 4x the step's (a graph at the reserved
        // capacity): partitions of one block iteration, most blocks idle.
        cuda::PlanDecode({n, g.hkv, 4 * longest, kH200Sms, true, 1, cuda::FastDecodeBlockKeys(g.hd, g.hq / g.hkv)}),
    };
    const std::vector<cuda::DecodeVariant> variants = VariantsOf(g);
    for (cuda::DecodeVariant variant : variants) {  // the tensor-core groups run both kernels
      for (const cuda::DecodePlan& plan : plans) {
        // The variant not chosen (SIMT at groups 4 and 8, still served at
        // head_dim 256): the direct path and a combine over many splits suffice.
        if (variant != variants.front() && plan.splits != 1 && plan.splits != 7) continue;
        ExpectFastMatches(c, plan, want, kContexts,
                          Describe(g) + " " + cuda::DecodeVariantName(variant) + " splits=" +
                              std::to_string(plan.splits) + " partition_size=" + std::to_string(plan.partition_size),
                          variant);
      }
    }
  }
}

// Contexts up to 32,768 keys (the longest Qwen3 serves without scaling is
// 40,960): each variant and head dim, with the step's own plan and with a grid
// fixed for 40,960 keys (a graph at the reserved capacity), against the
// reference kernel. The emulator runs one geometry at a few thousand keys.
TEST_F(DecodeAttentionTest, LauncherAtContextsUpTo32k) {
  SEED_TRACE();
  const std::vector<int32_t> contexts =
      cuda_test::kEmulated ? std::vector<int32_t>{1, 2049, 3000} : std::vector<int32_t>{1, 16385, 32768};
  const std::vector<Geometry> geometries =
      cuda_test::kEmulated ? std::vector<Geometry>{{8, 2, 64, 32}}
                           : std::vector<Geometry>{{16, 8, 128, 16}, {8, 2, 128, 16}, {32, 8, 64, 32},
                                                   {16, 2, 128, 32}, {4, 4, 256, 16}};
  const int n = static_cast<int>(contexts.size());
  const int64_t reserved = cuda_test::kEmulated ? 4096 : 40960;
  for (const Geometry& g : geometries) {
    LauncherCase c;
    c.g = g;
    Prepare(c, contexts, rng_);
    ASSERT_TRUE(cuda::FastDecodeCovers(c.args)) << Describe(g);
    const std::vector<float> want = ReferenceRows(c);
    for (const bool fixed : {false, true}) {
      const cuda::DecodePlan plan = cuda::PlanDecode({n, g.hkv, fixed ? reserved : contexts.back(), kH200Sms, fixed, 1,
                                                      cuda::FastDecodeBlockKeys(g.hd, g.hq / g.hkv)});
      ExpectFastMatches(c, plan, want, contexts,
                        Describe(g) + (fixed ? " graph plan" : " step plan") + " splits=" +
                            std::to_string(plan.splits) + " partition_size=" + std::to_string(plan.partition_size));
    }
  }
}

// The tensor-core variant where it is meant to run (groups 4 and 8 at head
// dims 64 and 128), the SIMT one elsewhere; and the launcher runs the chosen
// one: its output is bit for bit the forced variant's and not the other's
// (they round differently: the tensor-core kernel's P is bf16), so a launcher
// that silently fell back would fail here.
TEST_F(DecodeAttentionTest, EachShapeRunsTheVariantChosenForIt) {
  SEED_TRACE();
  using cuda::DecodeVariant;
  for (int hd : {64, 128, 256}) {
    for (int group : {1, 2, 4, 8}) {
      const bool mma = (group == 4 || group == 8) && hd <= 128;
      EXPECT_EQ(cuda::FastDecodeVariant(hd, group), mma ? DecodeVariant::kMma : DecodeVariant::kSimt)
          << "hd=" << hd << " group=" << group;
      EXPECT_EQ(cuda::FastDecodeHasVariant(DecodeVariant::kMma, hd, group), mma) << "hd=" << hd << " group=" << group;
      EXPECT_TRUE(cuda::FastDecodeHasVariant(DecodeVariant::kSimt, hd, group)) << "hd=" << hd << " group=" << group;
      EXPECT_GE(cuda::FastDecodeBlocksPerSm(hd, group), 1) << "hd=" << hd << " group=" << group;
    }
  }
  const std::vector<int32_t> contexts = {3, 40, 300};
  for (const Geometry& g : {Geometry{8, 2, 64, 16}, Geometry{8, 1, 128, 32}}) {
    LauncherCase c;
    c.g = g;
    Prepare(c, contexts, rng_);
    const std::vector<float> want = ReferenceRows(c);
    const cuda::DecodePlan plan{2, 128};
    const std::vector<uint16_t> chosen = ExpectFastMatches(c, plan, want, contexts, Describe(g) + " chosen");
    const std::vector<uint16_t> mma =
        ExpectFastMatches(c, plan, want, contexts, Describe(g) + " mma", DecodeVariant::kMma);
    const std::vector<uint16_t> simt =
        ExpectFastMatches(c, plan, want, contexts, Describe(g) + " simt", DecodeVariant::kSimt);
    EXPECT_TRUE(chosen == mma) << Describe(g) << ": the launcher did not run the tensor-core kernel";
    EXPECT_FALSE(chosen == simt) << Describe(g) << ": the launcher's output is the SIMT kernel's";
  }
  LauncherCase c;  // a group the tensor-core kernel does not serve: refused, not run as something else
  c.g = {2, 1, 64, 16};
  Prepare(c, {5}, rng_);
  EXPECT_EQ(cuda::LaunchFastDecodeAttention(DecodeVariant::kMma, c.args, kLead, {1, 256}, nullptr, 0, nullptr, nullptr),
            cudaErrorNotSupported);
}

TEST_F(DecodeAttentionTest, LauncherRejectsShapesItDoesNotCover) {
  for (const Geometry& g : {Geometry{3, 1, 64, 16}, Geometry{2, 2, 96, 16}, Geometry{16, 1, 64, 16}}) {
    LauncherCase c;
    c.g = g;
    Prepare(c, {5}, rng_);
    DeviceArray<uint16_t> out(static_cast<size_t>(c.T * c.out_width));
    c.args.out = reinterpret_cast<__nv_bfloat16*>(out.ptr);
    EXPECT_FALSE(cuda::FastDecodeCovers(c.args)) << Describe(g);
    EXPECT_EQ(cuda::LaunchFastDecodeAttention(c.args, kLead, {1, 256}, nullptr, 0, nullptr, nullptr), cudaErrorNotSupported)
        << Describe(g);
  }
  LauncherCase c;
  c.g = {4, 2, 64, 16};
  Prepare(c, {5}, rng_);
  EXPECT_EQ(cuda::LaunchFastDecodeAttention(c.args, kLead, {0, 256}, nullptr, 0, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchFastDecodeAttention(c.args, kLead, {1, 0}, nullptr, 0, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchFastDecodeAttention(c.args, kLead, {2, 256}, nullptr, 0, nullptr, nullptr), cudaErrorInvalidValue);
}

// ---- the backend's Attention op ----

class DecodeAttentionBackendTest : public DecodeAttentionTest, public ::testing::WithParamInterface<Geometry> {
 protected:
  // StoreKv + Attention of the step on the CPU backend, the reference kernel
  // set and the fast one (with and without Reserve), compared row by row.
  void RunAndCompare(const std::vector<SeqPart>& parts, int32_t num_prefill, const Geometry& g,
                     const std::string& what) {
    const int32_t bs = g.block_size;
    int64_t num_blocks = 0;
    for (const SeqPart& p : parts) {
      for (int32_t b : p.blocks) num_blocks = std::max<int64_t>(num_blocks, b + 1);
    }
    num_blocks += 3;
    StepBatch step = RandomStep(parts, bs, rng_, 100);
    step.mutable_arrays().num_prefill_seqs = num_prefill;
    step.mutable_arrays().num_decode_seqs = static_cast<int32_t>(parts.size()) - num_prefill;

    std::unique_ptr<Backend> cpu = MakeCpuBackend(), reference = MakeCudaBackend(0, cuda::KernelSet::kReference),
                             fast = MakeCudaBackend(0, cuda::KernelSet::kFast),
                             fast_unreserved = MakeCudaBackend(0, cuda::KernelSet::kFast);
    StepCapacity capacity;
    capacity.max_tokens = 64;
    capacity.max_seqs = 16;
    capacity.max_context = 8192;
    capacity.block_size = bs;
    capacity.max_query_heads = g.hq;
    capacity.max_head_dim = g.hd;
    ASSERT_TRUE(reference->Reserve(capacity).ok()) << what;
    ASSERT_TRUE(fast->Reserve(capacity).ok()) << what;
    const std::vector<Backend*> backends = {cpu.get(), reference.get(), fast.get(), fast_unreserved.get()};
    for (Backend* b : backends) {
      const absl::Status st = b->BeginStep(step.view(), num_blocks, bs, 8192);
      ASSERT_TRUE(st.ok()) << what << " " << b->name() << ": " << st;
    }
    const AttentionShape shape{g.hq, g.hkv, g.hd};
    const int64_t T = step.view().num_tokens(), hd = g.hd;
    const std::vector<float> k = RandomBf16(rng_, num_blocks * bs * g.hkv * hd);
    const std::vector<float> v = RandomBf16(rng_, num_blocks * bs * g.hkv * hd);
    const std::vector<float> qkv = RandomBf16(rng_, T * shape.qkv_width());
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    std::vector<std::vector<float>> results;
    for (Backend* b : backends) {
      Buffer kb = Upload(*b, k, {num_blocks, bs, g.hkv, hd}), vb = Upload(*b, v, {num_blocks, bs, g.hkv, hd});
      Buffer q = Upload(*b, qkv, {T, shape.qkv_width()});
      const KvCacheLayer cache{kb.tensor(), vb.tensor()};
      Buffer out = Output(*b, {T, int64_t{g.hq} * hd});
      b->StoreKv(q, shape, cache);
      b->Attention(q, shape, cache, scale, out.tensor());
      results.push_back(Download(*b, out));
    }
    const char* names[] = {"cpu", "reference kernels", "fast kernels (reserved)", "fast kernels (no workspace)"};
    const int64_t w = int64_t{g.hq} * hd;
    for (size_t r = 2; r < results.size(); ++r) {
      ExpectClose(results[r], results[0], kTol, std::string(names[r]) + " vs CPU, " + what);
      ExpectClose(results[r], results[1], kTol, std::string(names[r]) + " vs reference kernels, " + what);
      for (int64_t t = 0; t < T; ++t) {  // per row, so a short context is not hidden by the long ones
        const std::vector<float> got(results[r].begin() + t * w, results[r].begin() + (t + 1) * w);
        const std::vector<float> want(results[0].begin() + t * w, results[0].begin() + (t + 1) * w);
        EXPECT_LE(RelL2(got, want), kTol) << names[r] << ", " << what << " row " << t;
      }
    }
  }
};

TEST_P(DecodeAttentionBackendTest, DecodeOnlyAndMixedStepsMatchCpuAndReferenceKernels) {
  SEED_TRACE();
  const Geometry g = GetParam();
  std::vector<int32_t> lens = kContexts;
  lens.push_back(19);  // the mixed step's prefill
  int64_t total_blocks = 0;
  for (int32_t len : lens) total_blocks += (len + g.block_size - 1) / g.block_size;
  const auto blocks = DealBlocks(lens, g.block_size, total_blocks, rng_);
  std::vector<SeqPart> decodes;
  for (size_t i = 0; i < kContexts.size(); ++i) decodes.push_back({kContexts[i], 1, blocks[i]});
  RunAndCompare(decodes, 0, g, "decode-only " + Describe(g));
  std::vector<SeqPart> mixed = {{19, 5, blocks.back()}};  // a chunk after a cached prefix of 14
  mixed.insert(mixed.end(), decodes.begin(), decodes.end());
  RunAndCompare(mixed, 1, g, "mixed " + Describe(g));
  // One long decode alone: the plan splits it over many blocks and combines.
  RunAndCompare({decodes.back()}, 0, g, "one long decode " + Describe(g));
}

// Batch-1 decode attention as served: the fast set after Reserve, captured
// into a CUDA graph once (its grid fixed for the reserved context, with
// partitions of one block iteration: cuda/decode_plan.h), then replayed at
// contexts from 1 key to several partitions past a page, each replay against
// the reference set run eagerly on the same step. The busy blocks of a replay
// merge in the kernel (the last to arrive); a counter a replay left non-zero
// would make a later one skip its merge, and that replay's output would be
// the previous one's.
TEST_P(DecodeAttentionBackendTest, Batch1GraphReplaysMatchReferenceKernels) {
  SEED_TRACE();
  const Geometry g = GetParam();
  const int32_t bs = g.block_size, max_context = cuda_test::kEmulated ? 1024 : 8192;
  const AttentionShape shape{g.hq, g.hkv, g.hd};
  StepCapacity capacity;
  capacity.max_tokens = 4;
  capacity.max_seqs = 4;
  capacity.max_context = max_context;
  capacity.block_size = bs;
  capacity.max_query_heads = g.hq;
  capacity.max_head_dim = g.hd;
  std::unique_ptr<Backend> fast = MakeCudaBackend(0, cuda::KernelSet::kFast),
                           reference = MakeCudaBackend(0, cuda::KernelSet::kReference);
  ASSERT_TRUE(fast->Reserve(capacity).ok());
  const int64_t num_blocks = capacity.max_blocks_per_seq() + 3;
  const std::vector<int32_t> blocks = DealBlocks({max_context}, bs, num_blocks, rng_)[0];
  const std::vector<float> k = RandomBf16(rng_, num_blocks * bs * g.hkv * g.hd);
  const std::vector<float> v = RandomBf16(rng_, num_blocks * bs * g.hkv * g.hd);
  struct Side {
    Buffer k, v, qkv, out;
  };
  Side sides[2];
  Backend* backends[2] = {fast.get(), reference.get()};
  for (int i = 0; i < 2; ++i) {
    sides[i].k = Upload(*backends[i], k, {num_blocks, bs, g.hkv, g.hd});
    sides[i].v = Upload(*backends[i], v, {num_blocks, bs, g.hkv, g.hd});
    sides[i].qkv = Upload(*backends[i], RandomBf16(rng_, shape.qkv_width()), {1, shape.qkv_width()});
    sides[i].out = Output(*backends[i], {1, int64_t{g.hq} * g.hd});
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(g.hd));
  // The decode of one sequence at `context` keys, padded to the graph's bucket (1) and table width.
  const auto step_at = [&](int32_t context) {
    const int32_t used = (context + bs - 1) / bs;
    StepBatch own = RandomStep({{context, 1, std::vector<int32_t>(blocks.begin(), blocks.begin() + used)}}, bs, rng_, 100);
    StepBatch padded;
    EXPECT_TRUE(padded.AssignPaddedDecode(own.view(), 1, capacity.max_blocks_per_seq(), bs).ok());
    return padded;
  };
  const auto attend = [&](Backend& b, Side& side) {
    const KvCacheLayer cache{side.k.tensor(), side.v.tensor()};
    b.StoreKv(side.qkv, shape, cache);
    b.Attention(side.qkv, shape, cache, scale, side.out.tensor());
  };
  const StepBatch first = step_at(1);
  ASSERT_TRUE(fast->BeginStep(first.view(), num_blocks, bs, max_context).ok());
  ASSERT_TRUE(fast->BeginCapture().ok());
  attend(*fast, sides[0]);
  absl::StatusOr<std::unique_ptr<BackendGraph>> graph = fast->EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int32_t context : {1, 2, 33, 64, 65, 200, cuda_test::kLongContext, max_context}) {
    const StepBatch step = step_at(context);
    const std::vector<float> q = RandomBf16(rng_, shape.qkv_width());
    std::vector<float> results[2];
    for (int i = 0; i < 2; ++i) {
      backends[i]->CopyFromHost(q.data(), DType::kF32, sides[i].qkv.tensor());
      ASSERT_TRUE(backends[i]->BeginStep(step.view(), num_blocks, bs, max_context).ok());
      if (i == 0) {
        (*graph)->Replay();
      } else {
        attend(*backends[i], sides[i]);
      }
      results[i] = Download(*backends[i], sides[i].out.tensor());
    }
    ExpectClose(results[0], results[1], kTol, Describe(g) + " graph replay at context " + std::to_string(context));
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, DecodeAttentionBackendTest, ::testing::ValuesIn(kGeometries),
                         [](const ::testing::TestParamInfo<Geometry>& info) {
                           const Geometry& g = info.param;
                           return "Hq" + std::to_string(g.hq) + "Hkv" + std::to_string(g.hkv) + "hd" +
                                  std::to_string(g.hd) + "bs" + std::to_string(g.block_size);
                         });

}  // namespace
}  // namespace tpserve
