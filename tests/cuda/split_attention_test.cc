// Split decode attention (flash-decoding, cuda/attention.cuh) on the GPU:
//   * the launcher itself against a double-precision host reference and
//     against the single kernel, for partition sizes that put partition
//     boundaries mid-block, a grid deeper than any context (blocks past the
//     context must exit and never be read: the workspace is NaN-poisoned), and
//     rows before first_token left untouched;
//   * the CUDA backend's Attention op under the reference kernel set after
//     Reserve (split path for decode rows, single kernel for prefill rows)
//     against the CPU backend and against a CUDA backend without Reserve
//     (single kernel for every row).
// Contexts 1, 3, 7, 19, 111, 4097; GQA ratios 1, 2, 8 (and 12: two head
// chunks); head dims 64 and 128; block sizes 1, 16 (and 7, 48: mid-block
// partition boundaries). Outputs are poisoned with NaN first. Skips without a
// GPU. Replay a failure with TPSERVE_TEST_SEED=<the printed seed>.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "cuda/attention.cuh"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_set.h"
#include "model/dtype.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_sizes.h"

namespace tpserve {
namespace {

using cuda_test::DealBlocks;
using cuda_test::DeviceArray;
using cuda_test::FromBf16;
using cuda_test::ToBf16;
using cuda_test::Download;
using cuda_test::Output;
using cuda_test::RandomStep;
using cuda_test::RandomBf16;
using cuda_test::SeqPart;
using cuda_test::Upload;

const std::vector<int32_t> kContexts = {1, 3, 7, 19, 111, cuda_test::kLongContext};

struct Geometry {
  int hq, hkv, hd, block_size;
};

std::string Describe(const Geometry& g) {
  return "Hq=" + std::to_string(g.hq) + " Hkv=" + std::to_string(g.hkv) + " hd=" + std::to_string(g.hd) +
         " block_size=" + std::to_string(g.block_size);
}

class SplitAttentionTest : public ::testing::Test {
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

// Rows 0 .. kLead-1 belong to the caller's prefill: the split launcher must
// not write them. Rows kLead .. are decodes, one per context.
constexpr int kLead = 2;

// One decode row per context of kContexts after kLead lead rows, in random
// blocks of a cache with spare blocks of garbage nobody may read.
struct DecodeInputs {
  int n = 0, T = 0;  // decode rows, all rows
  int64_t width = 0, out_width = 0;
  int32_t max_blocks = 1;
  std::vector<std::vector<int32_t>> blocks_of;  // [decode row]: its blocks
  std::vector<int32_t> tables, token_seq, positions;
  std::vector<float> qkv, k, v;
  float scale = 0;
};

DecodeInputs MakeDecodeInputs(const Geometry& g, std::mt19937& rng) {
  DecodeInputs in;
  in.n = static_cast<int>(kContexts.size());
  in.T = kLead + in.n;
  in.width = int64_t{g.hq + 2 * g.hkv} * g.hd;
  in.out_width = int64_t{g.hq} * g.hd;
  int64_t num_blocks = 3;
  for (int32_t len : kContexts) num_blocks += (len + g.block_size - 1) / g.block_size;
  in.blocks_of = DealBlocks(kContexts, g.block_size, num_blocks, rng);
  for (const auto& b : in.blocks_of) in.max_blocks = std::max(in.max_blocks, static_cast<int32_t>(b.size()));
  // Sequence s = decode s; the lead rows borrow sequence 0 at position 0.
  for (const auto& b : in.blocks_of) {
    std::vector<int32_t> row = b;
    row.resize(in.max_blocks, -1);
    in.tables.insert(in.tables.end(), row.begin(), row.end());
  }
  in.token_seq.resize(in.T);
  in.positions.resize(in.T);
  for (int t = 0; t < in.T; ++t) {
    in.token_seq[t] = t < kLead ? 0 : t - kLead;
    in.positions[t] = t < kLead ? 0 : kContexts[t - kLead] - 1;
  }
  in.qkv = RandomBf16(rng, in.T * in.width);
  in.k = RandomBf16(rng, num_blocks * g.block_size * g.hkv * g.hd);
  in.v = RandomBf16(rng, num_blocks * g.block_size * g.hkv * g.hd);
  in.scale = 1.f / std::sqrt(static_cast<float>(g.hd));
  return in;
}

// softmax(q · K · scale) · V in double for decode row i, head h, with the
// derived bounds of a kernel's error on it (HostAttentionRowBounded).
cuda_test::AttentionBounded HostDecodeRow(const DecodeInputs& in, const Geometry& g, int i, int h) {
  const int t = kLead + i;
  auto slot = [&](int j) { return int64_t{in.blocks_of[i][j / g.block_size]} * g.block_size + j % g.block_size; };
  return cuda_test::HostAttentionRowBounded(in.qkv.data() + t * in.width + int64_t{h} * g.hd, in.k, in.v, g.hkv,
                                            g.hd, h / (g.hq / g.hkv), kContexts[i], in.scale, slot);
}

// The host reference of every decode row (rounded to float) and the bounds of
// a kernel against it (its own bound plus the float rounding) and of one
// kernel against another (twice a kernel's bound).
struct DecodeWant {
  std::vector<float> want;
  std::vector<double> vs_host, vs_kernel;
};
DecodeWant HostDecode(const DecodeInputs& in, const Geometry& g) {
  DecodeWant w;
  for (int i = 0; i < in.n; ++i) {
    for (int h = 0; h < g.hq; ++h) {
      const cuda_test::AttentionBounded row = HostDecodeRow(in, g, i, h);
      for (size_t d = 0; d < row.out.size(); ++d) {
        w.want.push_back(static_cast<float>(row.out[d]));
        w.vs_host.push_back(row.gpu[d] + cuda_test::kF32Unit * std::abs(row.out[d]));
        w.vs_kernel.push_back(2 * row.gpu[d]);
      }
    }
  }
  return w;
}

// The inputs on the device, and the kernel arguments over them (out unset).
struct DeviceDecode {
  DeviceArray<uint16_t> qkv, k, v;
  DeviceArray<int32_t> seq, pos, tables;
  cuda::PagedAttentionArgs a;

  DeviceDecode(const DecodeInputs& in, const Geometry& g)
      : qkv(in.qkv.size()), k(in.k.size()), v(in.v.size()), seq(in.T), pos(in.T), tables(in.tables.size()) {
    qkv.Upload(ToBf16(in.qkv));
    k.Upload(ToBf16(in.k));
    v.Upload(ToBf16(in.v));
    seq.Upload(in.token_seq);
    pos.Upload(in.positions);
    tables.Upload(in.tables);
    a.qkv = reinterpret_cast<const __nv_bfloat16*>(qkv.ptr);
    a.num_tokens = in.T;
    a.token_seq = seq.ptr;
    a.positions = pos.ptr;
    a.block_tables = tables.ptr;
    a.max_blocks_per_seq = in.max_blocks;
    a.block_size = g.block_size;
    a.num_heads = g.hq;
    a.num_kv_heads = g.hkv;
    a.head_dim = g.hd;
    a.scale = in.scale;
    a.k_cache = reinterpret_cast<const __nv_bfloat16*>(k.ptr);
    a.v_cache = reinterpret_cast<const __nv_bfloat16*>(v.ptr);
  }
};

// The split launcher with partitions of `partition_size` keys over a grid
// deeper than any context: refuses a workspace one float short, leaves the
// lead rows alone, and matches `want` (host) and `single` (the single
// kernel), every element within its derived bound.
void CheckSplit(cuda::PagedAttentionArgs a, const DecodeInputs& in, const Geometry& g, int partition_size,
                const DecodeWant& want, const std::vector<float>& single) {
  const std::string what = Describe(g) + " partition_size=" + std::to_string(partition_size);
  const int max_ctx = *std::max_element(kContexts.begin(), kContexts.end());
  cuda::SplitDecodeArgs split;
  split.first_token = kLead;
  split.partition_size = partition_size;
  split.max_partitions = (max_ctx + partition_size - 1) / partition_size + 3;  // deeper than any context
  split.workspace_floats = cuda::SplitDecodeWorkspaceFloats(in.n, g.hq, g.hd, split.max_partitions);
  DeviceArray<float> ws(split.workspace_floats);
  ws.Poison();  // a partition the combine reads but nobody wrote would give NaN
  split.workspace = ws.ptr;
  DeviceArray<uint16_t> out(size_t(in.T * in.out_width));
  out.Poison();
  a.out = reinterpret_cast<__nv_bfloat16*>(out.ptr);

  cuda::SplitDecodeArgs small = split;
  small.workspace_floats -= 1;
  EXPECT_EQ(cuda::LaunchSplitDecodeAttention(a, small, nullptr), cudaErrorInvalidValue) << what;

  ASSERT_EQ(cuda::LaunchSplitDecodeAttention(a, split, nullptr), cudaSuccess) << what;
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> raw = out.Download();
  for (int64_t e = 0; e < kLead * in.out_width; ++e) {
    ASSERT_EQ(raw[e], 0xffff) << what << ": row " << e / in.out_width << " before first_token was written";
  }
  const std::vector<float> all = FromBf16(raw);
  const std::vector<float> got(all.begin() + kLead * in.out_width, all.end());
  cuda_test::ExpectWithinBound(got, want.want, want.vs_host, "split vs host reference, " + what);
  cuda_test::ExpectWithinBound(got, single, want.vs_kernel, "split vs single kernel, " + what);
}

TEST_F(SplitAttentionTest, LauncherMatchesHostReferenceAndSingleKernel) {
  SEED_TRACE();
  const Geometry geometries[] = {{3, 3, 64, 16}, {4, 2, 128, 1}, {16, 2, 128, 16},
                                 {8, 1, 64, 7},  {12, 1, 128, 48}, {16, 2, 64, 1}};
  for (const Geometry& g : geometries) {
    const DecodeInputs in = MakeDecodeInputs(g, rng_);
    const DecodeWant want = HostDecode(in, g);
    DeviceDecode dev(in, g);
    // The single kernel over every row, for comparison.
    DeviceArray<uint16_t> d_single(size_t(in.T * in.out_width));
    d_single.Poison();
    cuda::PagedAttentionArgs a = dev.a;
    a.out = reinterpret_cast<__nv_bfloat16*>(d_single.ptr);
    ASSERT_EQ(cuda::LaunchPagedAttention(a, nullptr), cudaSuccess);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> single_all = FromBf16(d_single.Download());
    const std::vector<float> single(single_all.begin() + kLead * in.out_width, single_all.end());
    cuda_test::ExpectWithinBound(single, want.want, want.vs_host, "single kernel " + Describe(g));
    for (int partition_size : {3, 100, 512}) CheckSplit(dev.a, in, g, partition_size, want, single);
  }
}

// ---- the backend's Attention op ----

struct BackendCase {
  Geometry g;
};

void PrintTo(const BackendCase& c, std::ostream* os) { *os << Describe(c.g); }

class SplitAttentionBackendTest : public SplitAttentionTest, public ::testing::WithParamInterface<BackendCase> {
 protected:
  // Runs StoreKv + Attention of `step` on the CPU backend, a CUDA backend
  // without Reserve (single kernel) and one with Reserve (split decode rows),
  // and compares the three.
  void RunAndCompare(const std::vector<SeqPart>& parts, int32_t num_prefill, const Geometry& g,
                     const std::string& what) {
    const int32_t bs = g.block_size;
    int64_t num_blocks = 0;
    int32_t max_context = 1;
    for (const SeqPart& p : parts) {
      for (int32_t b : p.blocks) num_blocks = std::max<int64_t>(num_blocks, b + 1);
      max_context = std::max(max_context, p.seq_len);
    }
    num_blocks += 3;  // unused blocks hold garbage nobody may read
    StepBatch step = RandomStep(parts, bs, rng_, 100);
    step.mutable_arrays().num_prefill_seqs = num_prefill;  // a 1-token context may be a decode
    step.mutable_arrays().num_decode_seqs = static_cast<int32_t>(parts.size()) - num_prefill;

    // The reference kernel set: under the fast one decode rows take cuda/decode_attention.cuh
    // (tests/cuda/decode_attention_test.cc).
    std::unique_ptr<Backend> cpu = MakeCpuBackend(), single = MakeCudaBackend(0, cuda::KernelSet::kReference),
                             split = MakeCudaBackend(0, cuda::KernelSet::kReference);
    StepCapacity capacity;
    capacity.max_tokens = 64;
    capacity.max_seqs = 16;
    capacity.max_context = 8192;
    capacity.block_size = bs;
    capacity.max_query_heads = g.hq;
    capacity.max_head_dim = g.hd;
    ASSERT_TRUE(split->Reserve(capacity).ok()) << what;
    ASSERT_LE(step.view().num_tokens(), capacity.max_tokens);
    ASSERT_LE(max_context, capacity.max_context);
    for (Backend* b : {cpu.get(), single.get(), split.get()}) {
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
    for (Backend* b : {cpu.get(), single.get(), split.get()}) {
      Buffer kb = Upload(*b, k, {num_blocks, bs, g.hkv, hd}), vb = Upload(*b, v, {num_blocks, bs, g.hkv, hd});
      Buffer q = Upload(*b, qkv, {T, shape.qkv_width()});
      const KvCacheLayer cache{kb.tensor(), vb.tensor()};
      Buffer out = Output(*b, {T, int64_t{g.hq} * hd});
      b->StoreKv(q, shape, cache);
      b->Attention(q, shape, cache, scale, out.tensor());
      results.push_back(Download(*b, out));
    }
    // Every element within its derived bound (HostAttentionRowBounded): a
    // short context cannot hide behind the long ones.
    const cuda_test::AttentionBounded want =
        cuda_test::HostStepAttention(parts, bs, shape, qkv, k, v, scale, /*store_kv=*/true);
    const std::vector<double> vs_cpu = cuda_test::Plus(want.gpu, want.cpu), vs_kernel = cuda_test::Plus(want.gpu, want.gpu);
    cuda_test::ExpectWithinBound(results[1], results[0], vs_cpu, "single kernel vs CPU, " + what);
    cuda_test::ExpectWithinBound(results[2], results[0], vs_cpu, "split (reserved) vs CPU, " + what);
    cuda_test::ExpectWithinBound(results[2], results[1], vs_kernel, "split (reserved) vs single kernel, " + what);
  }
};

TEST_P(SplitAttentionBackendTest, DecodeOnlyAndMixedStepsMatchCpuAndSingleKernel) {
  SEED_TRACE();
  const Geometry g = GetParam().g;
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
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, SplitAttentionBackendTest,
    ::testing::Values(BackendCase{{3, 3, 64, 1}}, BackendCase{{3, 3, 128, 16}},    // GQA 1 (MHA)
                      BackendCase{{4, 2, 64, 16}}, BackendCase{{4, 2, 128, 1}},    // GQA 2
                      BackendCase{{16, 2, 64, 1}}, BackendCase{{16, 2, 128, 16}},  // GQA 8
                      BackendCase{{12, 1, 128, 16}}));                             // two head chunks

// Contexts across several 512-key partitions with block sizes that do not
// divide 512, so partition boundaries fall inside a block.
TEST_F(SplitAttentionBackendTest, PartitionBoundariesInsideABlock) {
  SEED_TRACE();
  for (int32_t bs : {7, 48}) {
    const Geometry g{8, 4, 128, bs};
    const std::vector<int32_t> lens = {511, 512, 513, 1025, 1500, 2049};
    int64_t nb = 0;
    for (int32_t len : lens) nb += (len + bs - 1) / bs;
    const auto blocks = DealBlocks(lens, bs, nb, rng_);
    std::vector<SeqPart> decodes;
    for (size_t i = 0; i < lens.size(); ++i) decodes.push_back({lens[i], 1, blocks[i]});
    RunAndCompare(decodes, 0, g, "mid-block boundaries " + Describe(g));
  }
}

}  // namespace
}  // namespace tpserve
