// The CUDA backend's deterministic mode, op by op (cuda/cuda_backend.h):
//   * the batch-invariant GEMM (cuda/det_gemm.cuh) against a double-precision
//     host reference within its derived bound, and each row of a 150-row
//     launch bit for bit the same in launches of 1 to 149 rows at other
//     places in their tiles, through 16-byte and element-wise loads;
//   * the batch-invariant attention (cuda/det_attention.cuh) through the
//     backend's Attention op: one sequence's rows, computed as one whole
//     prefill, give the same bits as prefill chunks of 1 token to the whole
//     prompt after a cached prefix, as rows of mixed steps among other
//     sequences, and as decode rows among other decodes, in order
//     (unreserved) and split across blocks (after Reserve); contexts cross
//     several partitions (the backend's partition size shrunk to 32 keys
//     here, 512 on a GPU run) and pages inside a 16-key tile; the whole
//     prefill within the derived attention bound of a host reference;
//   * the rank-order all-reduce (cuda/rank_order_all_reduce.h) over gloo at
//     tp 3: every rank gets ((t0 + t1) + t2) in fp32, rounded once.
// Built twice: label gpu (skips without a device) and label cuda-emu
// (tests/cuda_emu/, smaller sizes). Replay a failure with
// TPSERVE_TEST_SEED=<the printed seed>.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuda/cuda_backend.h"
#include "cuda/det_attention.cuh"
#include "cuda/det_gemm.cuh"
#include "cuda/rank_order_all_reduce.h"
#include "model/dtype.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_sizes.h"
#if defined(TPSERVE_WITH_GLOO)
#include "comm/gloo_communicator.h"
#include "comm/store.h"
#endif

namespace tpserve {
namespace {

using cuda_test::DeviceArray;
using cuda_test::Download;
using cuda_test::FromBf16;
using cuda_test::Output;
using cuda_test::RandomBf16;
using cuda_test::SeqPart;
using cuda_test::ToBf16;
using cuda_test::Upload;

class DeterministicOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
    seed_ = cuda_test::TestSeed();
    rng_.seed(static_cast<std::mt19937::result_type>(seed_));
  }
  uint64_t seed_ = 0;
  std::mt19937 rng_;
};
#define SEED_TRACE() SCOPED_TRACE(::testing::Message() << "TPSERVE_TEST_SEED=" << seed_)

// ---- the GEMM ----

// y = x·wᵀ (+ bias) through LaunchDetGemm on x (host floats, bf16-exact) at
// `x_offset` elements into its device buffer (an offset that is no multiple
// of 8 makes the launch load element by element).
std::vector<float> DetGemm(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* bias,
                           int64_t M, int64_t N, int64_t K, int64_t x_offset = 0) {
  DeviceArray<uint16_t> xd(static_cast<size_t>(x_offset + M * K)), wd(w.size()), yd(static_cast<size_t>(M * N));
  DeviceArray<uint16_t> bd(bias ? bias->size() : 1);
  std::vector<uint16_t> xh(static_cast<size_t>(x_offset), 0);
  const std::vector<uint16_t> xb = ToBf16(x);
  xh.insert(xh.end(), xb.begin(), xb.end());
  xd.Upload(xh);
  wd.Upload(ToBf16(w));
  if (bias) bd.Upload(ToBf16(*bias));
  yd.Poison();
  const auto* bf = [](const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }(xd.ptr + x_offset);
  EXPECT_EQ(cuda::LaunchDetGemm(bf, reinterpret_cast<const __nv_bfloat16*>(wd.ptr),
                                bias ? reinterpret_cast<const __nv_bfloat16*>(bd.ptr) : nullptr, M, N, K,
                                reinterpret_cast<__nv_bfloat16*>(yd.ptr), nullptr),
            cudaSuccess);
  CUDA_CHECK(cudaDeviceSynchronize());
  return FromBf16(yd.Download());
}

// The GEMM's bound (cuda_test_util.h, "Tolerances derived from the
// arithmetic"): K exact bf16 products and the bias summed in fp32 (γ_{K+1}·A,
// A = Σ|x·w| + |bias|), then one rounding to bf16 (u·|S| of the result).
std::vector<double> DetGemmBound(const cuda_test::HostDots& d, int64_t K) {
  std::vector<double> b(d.sum.size());
  const double g = cuda_test::Gamma(K + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = cuda_test::kBf16Unit * std::abs(d.sum[i]) + (1 + cuda_test::kBf16Unit) * g * d.abs[i];
  return b;
}

TEST_F(DeterministicOpsTest, DetGemmMatchesAHostReferenceWithinItsBound) {
  SEED_TRACE();
  struct Shape {
    int64_t M, N, K;
    bool bias;
  };
  std::vector<Shape> shapes = {{1, 37, 136, false},   // one row; N past a 32-column block
                               {70, 33, 200, true},   // two row blocks; K past a 64-wide stage
                               {5, 9, 12, true},      // K no multiple of 8: element-wise loads
                               {130, 64, 64, false}};  // three row blocks, whole column blocks
  if (!cuda_test::kEmulated) shapes.push_back({300, 1000, 1024, true});
  for (const Shape& s : shapes) {
    const std::string what = absl::StrCat("M ", s.M, " N ", s.N, " K ", s.K, s.bias ? " with bias" : "");
    const std::vector<float> x = RandomBf16(rng_, s.M * s.K), w = RandomBf16(rng_, s.N * s.K, 0.1f);
    const std::vector<float> bias = RandomBf16(rng_, s.N);
    const std::vector<float> y = DetGemm(x, w, s.bias ? &bias : nullptr, s.M, s.N, s.K);
    const cuda_test::HostDots d = cuda_test::Dots(x, w, s.bias ? bias.data() : nullptr, s.M, s.K, s.N);
    cuda_test::ExpectWithinBound(y, std::vector<float>(d.sum.begin(), d.sum.end()), DetGemmBound(d, s.K), what);
  }
}

// Row m of a launch is the same bits in any launch holding it, at any place in
// a tile, with either load path: the property Linear's callers rely on.
TEST_F(DeterministicOpsTest, DetGemmRowsAreTheSameBitsInEveryBatch) {
  SEED_TRACE();
  const int64_t M = 150, N = 45, K = 136;  // rows of K bf16 stay 16-byte aligned: 272 bytes
  const std::vector<float> x = RandomBf16(rng_, M * K), w = RandomBf16(rng_, N * K, 0.1f), bias = RandomBf16(rng_, N);
  const std::vector<float> all = DetGemm(x, w, &bias, M, N, K);
  struct Slice {
    int64_t first, rows;
  };
  for (const Slice& s : std::vector<Slice>{{0, 1}, {149, 1}, {7, 1}, {3, 17}, {64, 70}, {1, 149}}) {
    const std::vector<float> part(x.begin() + s.first * K, x.begin() + (s.first + s.rows) * K);
    const std::vector<float> got = DetGemm(part, w, &bias, s.rows, N, K);
    EXPECT_EQ(std::memcmp(got.data(), all.data() + s.first * N, got.size() * sizeof(float)), 0)
        << "rows " << s.first << " .. " << s.first + s.rows - 1 << " alone differ from the same rows among " << M;
  }
  const std::vector<float> unaligned = DetGemm(x, w, &bias, M, N, K, /*x_offset=*/1);
  EXPECT_EQ(std::memcmp(unaligned.data(), all.data(), all.size() * sizeof(float)), 0)
      << "element-wise loads (x not 16-byte aligned) change the bits";
}

TEST_F(DeterministicOpsTest, DetGemmRefusesBadArguments) {
  DeviceArray<uint16_t> buf(64);
  const auto* p = reinterpret_cast<const __nv_bfloat16*>(buf.ptr);
  auto* y = reinterpret_cast<__nv_bfloat16*>(buf.ptr);
  EXPECT_EQ(cuda::LaunchDetGemm(p, p, nullptr, 0, 4, 4, y, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchDetGemm(p, p, nullptr, 4, 4, -1, y, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchDetGemm(nullptr, p, nullptr, 4, 4, 4, y, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchDetGemm(p, p, nullptr, int64_t{1} << 32, 4, 4, y, nullptr), cudaErrorInvalidValue);
}

// ---- the attention ----

struct Geometry {
  int hq, hkv, hd, block_size;
};
std::string Describe(const Geometry& g) {
  return absl::StrCat("Hq ", g.hq, " Hkv ", g.hkv, " hd ", g.hd, " block size ", g.block_size);
}

constexpr int kPartitionKeys = cuda_test::kEmulated ? 32 : cuda::kDetPartitionKeys;
constexpr int32_t kTargetLen = cuda_test::kEmulated ? 100 : 1300;  // 4 and 3 partitions

// One sequence (the target) of kTargetLen positions and its query rows,
// computed in many steps beside others; the caches hold every position's K/V
// from the start (the steps run Attention only, no StoreKv), so a row's output
// may depend only on its position's query and the keys before it.
class DetAttentionTest : public DeterministicOpsTest {
 protected:
  void Prepare(const Geometry& g) {
    g_ = g;
    shape_ = AttentionShape{g.hq, g.hkv, g.hd};
    // The target's blocks first, then others' for up to 6 sequences of up to kTargetLen + 20.
    const int32_t per_seq = (kTargetLen + 20 + g.block_size - 1) / g.block_size;
    num_blocks_ = int64_t{per_seq} * 7;
    std::vector<int32_t> lens(7, kTargetLen + 20);
    blocks_ = cuda_test::DealBlocks(lens, g.block_size, num_blocks_, rng_);
    k_ = RandomBf16(rng_, num_blocks_ * g.block_size * g.hkv * g.hd);
    v_ = RandomBf16(rng_, num_blocks_ * g.block_size * g.hkv * g.hd);
    queries_ = RandomBf16(rng_, int64_t{kTargetLen} * g.hq * g.hd);
    scale_ = 1.f / std::sqrt(static_cast<float>(g.hd));
    cuda::KernelSet sets[] = {cuda::KernelSet::kFast, cuda::KernelSet::kReference};
    for (int i = 0; i < 2; ++i) {
      CudaBackendOptions o;
      o.kernels = sets[i];
      o.deterministic = true;
      o.deterministic_partition_keys = kPartitionKeys;
      backends_[i] = MakeCudaBackend(0, o);
    }
    StepCapacity capacity;
    capacity.max_tokens = 4 * kTargetLen;
    capacity.max_seqs = 16;
    capacity.max_context = kTargetLen + 20;
    capacity.block_size = g.block_size;
    capacity.max_query_heads = g.hq;
    capacity.max_head_dim = g.hd;
    ASSERT_TRUE(backends_[1]->Reserve(capacity).ok());  // split decode rows; the other runs them in order
  }

  // Attention of a step of `parts` (sequence 0 the target, the first
  // num_prefill prefills) on backend i: the output rows of the target's
  // tokens, [its tokens, Hq·hd].
  std::vector<float> TargetRows(int i, const std::vector<SeqPart>& parts, int32_t num_prefill) {
    Backend& b = *backends_[i];
    StepBatch step = cuda_test::RandomStep(parts, g_.block_size, rng_, 100);
    step.mutable_arrays().num_prefill_seqs = num_prefill;
    step.mutable_arrays().num_decode_seqs = static_cast<int32_t>(parts.size()) - num_prefill;
    const int64_t T = step.view().num_tokens(), width = shape_.qkv_width(), qw = int64_t{g_.hq} * g_.hd;
    std::vector<float> qkv = RandomBf16(rng_, T * width);
    for (int32_t j = 0; j < parts[0].n_new; ++j) {  // the target's rows are rows 0 .. n_new − 1
      const int32_t position = parts[0].seq_len - parts[0].n_new + j;
      std::copy(queries_.begin() + int64_t{position} * qw, queries_.begin() + int64_t{position + 1} * qw,
                qkv.begin() + j * width);
    }
    EXPECT_TRUE(b.BeginStep(step.view(), num_blocks_, g_.block_size, 8192).ok()) << b.name();
    Buffer kb = Upload(b, k_, {num_blocks_, g_.block_size, g_.hkv, g_.hd});
    Buffer vb = Upload(b, v_, {num_blocks_, g_.block_size, g_.hkv, g_.hd});
    Buffer q = Upload(b, qkv, {T, width});
    Buffer out = Output(b, {T, qw});
    b.Attention(q, shape_, KvCacheLayer{kb.tensor(), vb.tensor()}, scale_, out.tensor());
    const std::vector<float> rows = Download(b, out);
    return std::vector<float>(rows.begin(), rows.begin() + parts[0].n_new * qw);
  }

  // A SeqPart of another sequence (blocks_[1 + which]) with `n_new` tokens ending at seq_len.
  SeqPart Other(int which, int32_t seq_len, int32_t n_new) const { return {seq_len, n_new, blocks_[1 + which]}; }
  SeqPart Target(int32_t seq_len, int32_t n_new) const { return {seq_len, n_new, blocks_[0]}; }

  // got's rows are want's rows [first, first + rows / row width), bit for bit.
  void ExpectRows(const std::vector<float>& got, const std::vector<float>& want, int32_t first,
                  const std::string& what) {
    const int64_t qw = int64_t{g_.hq} * g_.hd;
    ASSERT_LE(first * qw + static_cast<int64_t>(got.size()), static_cast<int64_t>(want.size())) << what;
    for (size_t r = 0; r < got.size() / static_cast<size_t>(qw); ++r) {
      if (std::memcmp(got.data() + r * qw, want.data() + (first + r) * qw, qw * sizeof(float)) != 0) {
        ADD_FAILURE() << what << ": position " << first + static_cast<int32_t>(r)
                      << "'s row differs from the whole prefill's";
        return;
      }
    }
  }

  Geometry g_{};
  AttentionShape shape_{};
  int64_t num_blocks_ = 0;
  std::vector<std::vector<int32_t>> blocks_;
  std::vector<float> k_, v_, queries_;
  float scale_ = 1.f;
  std::unique_ptr<Backend> backends_[2];  // [0] unreserved (in order), [1] reserved (decode rows split)
};

std::vector<Geometry> DetGeometries() {
  std::vector<Geometry> all = {{4, 2, 64, 7}, {8, 1, 128, 16}, {2, 2, 128, 5}, {16, 2, 64, 16}};
  if (cuda_test::kEmulated) all.resize(2);  // GQA 2 at hd 64 (pages of 7 keys), GQA 8 at hd 128
  return all;
}

TEST_F(DetAttentionTest, ARowIsTheSameBitsInEveryStep) {
  SEED_TRACE();
  for (const Geometry& g : DetGeometries()) {
    Prepare(g);
    if (HasFatalFailure()) return;
    const std::string geometry = Describe(g);
    // The whole prompt in one prefill, alone: the bits every other way must give.
    const std::vector<float> whole = TargetRows(0, {Target(kTargetLen, kTargetLen)}, 1);
    {
      auto slot = [&](int j) {
        return int64_t{blocks_[0][static_cast<size_t>(j / g.block_size)]} * g.block_size + j % g.block_size;
      };
      const int64_t qw = int64_t{g.hq} * g.hd;
      std::vector<float> want;
      std::vector<double> bound;
      for (int32_t p = 0; p < kTargetLen; ++p) {
        for (int h = 0; h < g.hq; ++h) {
          const cuda_test::AttentionBounded row = cuda_test::HostAttentionRowBounded(
              queries_.data() + p * qw + int64_t{h} * g.hd, k_, v_, g.hkv, g.hd, h / (g.hq / g.hkv), p + 1, scale_,
              slot, /*merges=*/p / kPartitionKeys);
          want.insert(want.end(), row.out.begin(), row.out.end());
          bound.insert(bound.end(), row.gpu.begin(), row.gpu.end());
        }
      }
      cuda_test::ExpectWithinBound(whole, want, bound, "the whole prefill vs the host reference, " + geometry);
    }
    for (int i = 0; i < 2; ++i) {
      const std::string backend = i == 0 ? ", unreserved" : ", after Reserve";
      // Prefill chunks after a cached prefix, alone.
      for (int32_t chunk : {1, 5, kPartitionKeys + 1, kTargetLen}) {
        for (int32_t begin = 0; begin < kTargetLen; begin += std::max(chunk, kTargetLen / 4)) {
          const int32_t n = std::min(chunk, kTargetLen - begin);
          ExpectRows(TargetRows(i, {Target(begin + n, n)}, 1), whole, begin,
                     absl::StrCat(geometry, backend, ": a chunk of ", n, " after ", begin, " cached"));
        }
      }
      // A chunk in a mixed step: other prefills (one with a cached prefix) and decodes.
      const int32_t begin = kPartitionKeys - 3, n = kTargetLen - begin - 9;
      ExpectRows(TargetRows(i, {Target(begin + n, n), Other(0, 17, 17), Other(1, kTargetLen + 5, 40),
                                Other(2, 3, 1), Other(3, kTargetLen + 20, 1)},
                            3),
                 whole, begin, geometry + backend + ": a chunk in a mixed step");
      // Decode rows among other decodes (contexts below, at and past partition boundaries).
      for (int32_t position : {0, kPartitionKeys - 1, kPartitionKeys, 2 * kPartitionKeys + 1, kTargetLen - 1}) {
        ExpectRows(TargetRows(i, {Target(position + 1, 1), Other(0, 1, 1), Other(1, kTargetLen + 20, 1),
                                  Other(2, kPartitionKeys, 1)},
                              0),
                   whole, position, absl::StrCat(geometry, backend, ": a decode row at position ", position));
        ExpectRows(TargetRows(i, {Target(position + 1, 1)}, 0), whole, position,
                   absl::StrCat(geometry, backend, ": a decode row alone at position ", position));
      }
      if (HasFailure()) return;
    }
  }
}

TEST_F(DeterministicOpsTest, DetAttentionRefusesShapesItDoesNotCover) {
  EXPECT_TRUE(cuda::DetAttentionCovers(64, 32, 8));
  EXPECT_TRUE(cuda::DetAttentionCovers(128, 16, 1));
  EXPECT_FALSE(cuda::DetAttentionCovers(96, 8, 8));
  EXPECT_FALSE(cuda::DetAttentionCovers(128, 32, 1));  // 32 query heads a KV head: more than one warp's rows
  EXPECT_FALSE(cuda::DetAttentionCovers(128, 6, 4));
  cuda::PagedAttentionArgs a;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 64;
  a.block_size = 16;
  cuda::DetAttentionRows rows;
  rows.partition_keys = 24;  // not a multiple of the 16-key tile
  EXPECT_EQ(cuda::LaunchDetAttention(a, rows, nullptr), cudaErrorInvalidValue);
  rows.partition_keys = 32;
  a.num_tokens = 3;
  rows.max_partitions = 4;  // split without a workspace
  EXPECT_EQ(cuda::LaunchDetAttention(a, rows, nullptr), cudaErrorInvalidValue);
}

// ---- the all-reduce ----

#if defined(TPSERVE_WITH_GLOO)
TEST_F(DeterministicOpsTest, RankOrderAllReduceAddsTheRanksInOrderOnEveryRank) {
  SEED_TRACE();
  constexpr int kRanks = 3;
  const int64_t n = 1001;
  // f32 inputs that are not bf16-exact, so the order of the additions shows in the bits.
  std::vector<std::vector<float>> f32(kRanks), bf16(kRanks);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (int r = 0; r < kRanks; ++r) {
    for (int64_t i = 0; i < n; ++i) f32[r].push_back(dist(rng_) * std::pow(2.f, static_cast<float>(i % 9)));
    bf16[r] = RandomBf16(rng_, n);
  }
  std::vector<float> want_f32(static_cast<size_t>(n)), want_bf16(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float a = f32[0][i], b = bf16[0][i];
    for (int r = 1; r < kRanks; ++r) a = a + f32[r][i], b = b + bf16[r][i];
    want_f32[i] = a;
    want_bf16[i] = Bf16ToFloat(FloatToBf16(b));
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("tpserve_rank_order_", ::getpid());
  std::filesystem::create_directories(dir);
  std::vector<std::vector<float>> got_f32(kRanks), got_bf16(kRanks);
  std::vector<absl::Status> too_large(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Backend> backend = MakeCudaBackend(0);
      absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(dir.string());
      ASSERT_TRUE(store.ok()) << store.status();
      absl::StatusOr<std::unique_ptr<Communicator>> gloo = MakeGlooCommunicator(**store, r, kRanks);
      ASSERT_TRUE(gloo.ok()) << gloo.status();
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          cuda::MakeRankOrderAllReduce(*std::move(gloo), static_cast<cudaStream_t>(backend->stream()), 2 * n);
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_FALSE((*comm)->SupportsGraphCapture());  // gloo's, passed through
      Buffer a = Upload(*backend, f32[r], {n}, DType::kF32);
      Buffer b = Upload(*backend, bf16[r], {n});
      EXPECT_TRUE((*comm)->AllReduceSum(a.tensor()).ok());
      EXPECT_TRUE((*comm)->AllReduceSum(b.tensor()).ok());
      got_f32[r] = Download(*backend, a);
      got_bf16[r] = Download(*backend, b);
      Buffer big = backend->Allocate(DType::kF32, {2 * n});  // twice the bytes the workspace holds a rank
      too_large[r] = (*comm)->AllReduceSum(big.tensor());
    });
  }
  for (std::thread& t : threads) t.join();
  std::filesystem::remove_all(dir);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(std::memcmp(got_f32[r].data(), want_f32.data(), n * sizeof(float)), 0) << "f32 on rank " << r;
    EXPECT_EQ(std::memcmp(got_bf16[r].data(), want_bf16.data(), n * sizeof(float)), 0) << "bf16 on rank " << r;
    EXPECT_EQ(too_large[r].code(), absl::StatusCode::kInvalidArgument) << too_large[r];
  }
}
#endif

}  // namespace
}  // namespace tpserve
