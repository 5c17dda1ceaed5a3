// Every op of the CUDA backend against the CPU backend (the fp32 oracle) on
// fresh random inputs with odd sizes: bf16-exact inputs given to both, GPU
// outputs poisoned with NaN first, relative L2 error within bf16 tolerance.
// Replay a failure with TPSERVE_TEST_SEED=<the printed seed>.
#include "cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_sizes.h"

namespace tpserve {
namespace {

using cuda_test::Download;
using cuda_test::ExpectClose;
using cuda_test::Output;
using cuda_test::RandomStep;
using cuda_test::RandomBf16;
using cuda_test::SeqPart;
using cuda_test::Upload;

constexpr double kTol = 1e-2;
const int64_t kOddSizes[] = {1, 3, 7, 19, 111, cuda_test::kLargeDim};

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
    seed_ = cuda_test::TestSeed();
    rng_.seed(seed_);
    gpu_ = MakeCudaBackend(0);
  }
  // Makes `parts` current on both backends (cache of num_blocks × block_size).
  void Begin(const StepBatch& step, int64_t num_blocks, int32_t block_size, int64_t max_position) {
    ASSERT_TRUE(cpu_->BeginStep(step.view(), num_blocks, block_size, max_position).ok());
    ASSERT_TRUE(gpu_->BeginStep(step.view(), num_blocks, block_size, max_position).ok());
  }
  // A step of one prefill sequence with T new tokens from position 0.
  std::unique_ptr<StepBatch> SimpleStep(int32_t T, int32_t vocab, int32_t block_size = 16) {
    SeqPart p{T, T, {}};
    for (int32_t b = 0; b < (T + block_size - 1) / block_size; ++b) p.blocks.push_back(b);
    auto step = std::make_unique<StepBatch>(RandomStep(std::vector<SeqPart>{p}, block_size, rng_, vocab));
    Begin(*step, static_cast<int64_t>(p.blocks.size()), block_size, T);
    return step;
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<Backend> cpu_ = MakeCpuBackend();
  std::unique_ptr<Backend> gpu_;
};

#define SEED_TRACE() SCOPED_TRACE(::testing::Message() << "TPSERVE_TEST_SEED=" << seed_)

TEST_F(CudaBackendTest, CopiesRoundTripBf16AndF32) {
  SEED_TRACE();
  for (int64_t n : kOddSizes) {
    const std::vector<float> x = RandomBf16(rng_, n, 3.f);
    for (DType dt : {DType::kBF16, DType::kF32}) {
      Buffer a = Upload(*gpu_, x, {n}, dt);
      Buffer b = gpu_->Allocate(dt, {n});
      gpu_->Copy(a, b.tensor());
      EXPECT_EQ(Download(*gpu_, b), x) << "n=" << n << " dtype " << DTypeName(dt);
    }
  }
}

TEST_F(CudaBackendTest, EmbeddingMasksIdsOutsideTheShard) {
  SEED_TRACE();
  for (int64_t vs : {1, 7, 111}) {
    for (int64_t d : {int64_t{1}, int64_t{19}, cuda_test::kLargeDim}) {
      const int64_t vocab_start = 5;
      const std::vector<float> table = RandomBf16(rng_, vs * d);
      for (int32_t T : {1, 7, 19}) {
        auto step = SimpleStep(T, static_cast<int32_t>(vocab_start + vs + 3));  // some ids below/above
        Buffer tc = Upload(*cpu_, table, {vs, d}), tg = Upload(*gpu_, table, {vs, d});
        Buffer oc = Output(*cpu_, {T, d}), og = Output(*gpu_, {T, d});
        cpu_->Embedding(tc, vocab_start, oc.tensor());
        gpu_->Embedding(tg, vocab_start, og.tensor());
        const std::vector<float> c = Download(*cpu_, oc), g = Download(*gpu_, og);
        EXPECT_EQ(g, c) << "Vs=" << vs << " D=" << d << " T=" << T;  // a gather is exact
      }
    }
  }
}

TEST_F(CudaBackendTest, LinearMatchesWithAndWithoutBias) {
  SEED_TRACE();
  for (int64_t m : {1, 3, 7, 19, 111}) {
    for (int64_t k : {int64_t{1}, int64_t{19}, cuda_test::kLargeDim}) {
      for (int64_t n : {3, 111, 1027}) {
        const std::vector<float> x = RandomBf16(rng_, m * k), w = RandomBf16(rng_, n * k, 0.1f),
                                 bias = RandomBf16(rng_, n);
        Buffer xc = Upload(*cpu_, x, {m, k}), xg = Upload(*gpu_, x, {m, k});
        Buffer wc = Upload(*cpu_, w, {n, k}), wg = Upload(*gpu_, w, {n, k});
        Buffer bc = Upload(*cpu_, bias, {n}), bg = Upload(*gpu_, bias, {n});
        for (bool with_bias : {false, true}) {
          Buffer yc = Output(*cpu_, {m, n}), yg = Output(*gpu_, {m, n});
          cpu_->Linear(xc, wc, with_bias ? &bc.tensor() : nullptr, yc.tensor());
          gpu_->Linear(xg, wg, with_bias ? &bg.tensor() : nullptr, yg.tensor());
          ExpectClose(Download(*gpu_, yg), Download(*cpu_, yc), kTol,
                      ::testing::PrintToString(std::vector<int64_t>{m, k, n, with_bias}));
        }
      }
    }
  }
}

TEST_F(CudaBackendTest, RmsNormAndAddRmsNorm) {
  SEED_TRACE();
  for (int64_t m : {1, 3, 7, 19}) {
    for (int64_t d : kOddSizes) {
      const std::vector<float> x = RandomBf16(rng_, m * d, 2.f), r = RandomBf16(rng_, m * d, 2.f);
      std::vector<float> w = RandomBf16(rng_, d, 0.2f);
      for (float& v : w) v = Bf16ToFloat(FloatToBf16(1.f + v));
      const std::string what = "M=" + std::to_string(m) + " D=" + std::to_string(d);
      Buffer xc = Upload(*cpu_, x, {m, d}), xg = Upload(*gpu_, x, {m, d});
      Buffer wc = Upload(*cpu_, w, {d}), wg = Upload(*gpu_, w, {d});
      Buffer oc = Output(*cpu_, {m, d}), og = Output(*gpu_, {m, d});
      cpu_->RmsNorm(xc, wc, 1e-6f, oc.tensor());
      gpu_->RmsNorm(xg, wg, 1e-6f, og.tensor());
      ExpectClose(Download(*gpu_, og), Download(*cpu_, oc), kTol, "RmsNorm " + what);

      Buffer rc = Upload(*cpu_, r, {m, d}), rg = Upload(*gpu_, r, {m, d});
      cpu_->AddRmsNorm(xc.tensor(), rc.tensor(), wc, 1e-6f);
      gpu_->AddRmsNorm(xg.tensor(), rg.tensor(), wg, 1e-6f);
      ExpectClose(Download(*gpu_, rg), Download(*cpu_, rc), kTol, "AddRmsNorm residual " + what);
      ExpectClose(Download(*gpu_, xg), Download(*cpu_, xc), kTol, "AddRmsNorm x " + what);
    }
  }
}

// [max_pos, hd] = [cos | sin] of rotate-half RoPE with base 10000.
std::vector<float> RopeTable(int64_t max_pos, int64_t hd) {
  std::vector<float> rope(static_cast<size_t>(max_pos * hd));
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / hd);
      rope[p * hd + i] = static_cast<float>(std::cos(angle));
      rope[p * hd + hd / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
  return rope;
}

TEST_F(CudaBackendTest, QkNormRopeWithAndWithoutNorms) {
  SEED_TRACE();
  // The last: odd head counts and the kernel's largest head (kMaxRopeHeadDim).
  const AttentionShape shapes[] = {{4, 2, 24}, {6, 2, 64}, {2, 1, 128}, {16, 8, 128}, {3, 1, 512}};
  for (const AttentionShape& shape : shapes) {
    const int64_t hd = shape.head_dim, max_pos = 300;
    const std::vector<float> rope = RopeTable(max_pos, hd);
    std::vector<float> qn = RandomBf16(rng_, hd, 0.2f), kn = RandomBf16(rng_, hd, 0.2f);
    for (float& v : qn) v = Bf16ToFloat(FloatToBf16(1.f + v));
    for (float& v : kn) v = Bf16ToFloat(FloatToBf16(1.f + v));
    Buffer rc = Upload(*cpu_, rope, {max_pos, hd}, DType::kF32), rg = Upload(*gpu_, rope, {max_pos, hd}, DType::kF32);
    Buffer qnc = Upload(*cpu_, qn, {hd}), qng = Upload(*gpu_, qn, {hd});
    Buffer knc = Upload(*cpu_, kn, {hd}), kng = Upload(*gpu_, kn, {hd});
    for (int32_t T : {1, 7, 19, 111}) {
      // One sequence whose T new tokens end at a random position below max_pos.
      const int32_t seq_len = T + static_cast<int32_t>(rng_() % static_cast<uint32_t>(max_pos - T));
      SeqPart p{seq_len, T, {}};
      for (int32_t b = 0; b < (seq_len + 15) / 16; ++b) p.blocks.push_back(b);
      StepBatch step = RandomStep({p}, 16, rng_, 100);
      Begin(step, static_cast<int64_t>(p.blocks.size()), 16, max_pos);
      for (bool norms : {false, true}) {
        const std::vector<float> qkv = RandomBf16(rng_, T * shape.qkv_width());
        Buffer c = Upload(*cpu_, qkv, {T, shape.qkv_width()}), g = Upload(*gpu_, qkv, {T, shape.qkv_width()});
        cpu_->QkNormRope(c.tensor(), shape, norms ? &qnc.tensor() : nullptr, norms ? &knc.tensor() : nullptr,
                         1e-6f, rc);
        gpu_->QkNormRope(g.tensor(), shape, norms ? &qng.tensor() : nullptr, norms ? &kng.tensor() : nullptr,
                         1e-6f, rg);
        ExpectClose(Download(*gpu_, g), Download(*cpu_, c), kTol,
                    "Hq=" + std::to_string(shape.num_heads) + " hd=" + std::to_string(hd) +
                        " T=" + std::to_string(T) + (norms ? " norms" : ""));
      }
    }
  }
}

// The fused QkNormRope + StoreKv of the fast kernel set against the two
// reference ops on a reference-set backend (same qkv, NaN-free random caches)
// and against the CPU backend: qkv after the rotation and both caches. A
// padding token (slot −1) writes no slot; the slots no token writes keep
// their bytes exactly.
TEST_F(CudaBackendTest, FusedQkNormRopeStoreKvMatchesTheTwoOps) {
  SEED_TRACE();
  std::unique_ptr<Backend> reference = MakeCudaBackend(0, cuda::KernelSet::kReference);
  const AttentionShape shapes[] = {{4, 2, 24}, {16, 8, 128}, {3, 1, 512}};
  for (const AttentionShape& shape : shapes) {
    const int64_t hd = shape.head_dim, hkv = shape.num_kv_heads, max_pos = 300;
    const int32_t bs = 16;
    const std::vector<float> rope = RopeTable(max_pos, hd);
    std::vector<float> qn = RandomBf16(rng_, hd, 0.2f), kn = RandomBf16(rng_, hd, 0.2f);
    for (float& v : qn) v = Bf16ToFloat(FloatToBf16(1.f + v));
    for (float& v : kn) v = Bf16ToFloat(FloatToBf16(1.f + v));
    for (bool norms : {false, true}) {
      // A prefill after a cached prefix and two decodes; token 1 is padding.
      const std::vector<int32_t> lens = {40, 23, 7};
      const int64_t num_blocks = 3 + 2 + 1 + 2;
      const auto blocks = cuda_test::DealBlocks(lens, bs, num_blocks, rng_);
      StepBatch step = RandomStep({{40, 9, blocks[0]}, {23, 1, blocks[1]}, {7, 1, blocks[2]}}, bs, rng_, 100);
      step.mutable_arrays().slot_mapping[1] = -1;
      Begin(step, num_blocks, bs, max_pos);
      ASSERT_TRUE(reference->BeginStep(step.view(), num_blocks, bs, max_pos).ok());
      const int64_t T = step.view().num_tokens();
      const std::vector<float> qkv = RandomBf16(rng_, T * shape.qkv_width());
      const std::vector<float> cache_k = RandomBf16(rng_, num_blocks * bs * hkv * hd);
      const std::vector<float> cache_v = RandomBf16(rng_, num_blocks * bs * hkv * hd);
      struct Side {
        Backend* b;
        Buffer qkv, k, v, rope, qn, kn;
      };
      auto make = [&](Backend& b) {
        return Side{&b, Upload(b, qkv, {T, shape.qkv_width()}), Upload(b, cache_k, {num_blocks, bs, hkv, hd}),
                    Upload(b, cache_v, {num_blocks, bs, hkv, hd}), Upload(b, rope, {max_pos, hd}, DType::kF32),
                    Upload(b, qn, {hd}), Upload(b, kn, {hd})};
      };
      Side fast = make(*gpu_), ref = make(*reference), cpu = make(*cpu_);
      for (Side* side : {&fast, &ref, &cpu}) {
        side->b->QkNormRopeStoreKv(side->qkv.tensor(), shape, norms ? &side->qn.tensor() : nullptr,
                                   norms ? &side->kn.tensor() : nullptr, 1e-6f, side->rope,
                                   {side->k.tensor(), side->v.tensor()});
      }
      const std::string what = "Hq=" + std::to_string(shape.num_heads) + " hd=" + std::to_string(hd) +
                               (norms ? " norms" : "");
      // The block sums may round differently (thread counts differ): bf16-close, not bitwise.
      ExpectClose(Download(*gpu_, fast.qkv), Download(*reference, ref.qkv), 1e-2, what + " qkv vs reference");
      ExpectClose(Download(*gpu_, fast.k), Download(*reference, ref.k), 1e-2, what + " K cache vs reference");
      EXPECT_EQ(Download(*gpu_, fast.v), Download(*reference, ref.v)) << what << " V cache vs reference";
      ExpectClose(Download(*gpu_, fast.k), Download(*cpu_, cpu.k), kTol, what + " K cache vs CPU");
      EXPECT_EQ(Download(*gpu_, fast.v), Download(*cpu_, cpu.v)) << what << " V cache vs CPU";
      ExpectClose(Download(*gpu_, fast.qkv), Download(*cpu_, cpu.qkv), kTol, what + " qkv vs CPU");
    }
  }
}

// A step of more tokens than grid.y allows (65,535): the kernel once put the
// token count there, so a large step budget aborted the worker at launch. Too
// slow for the emulator (131,074 blocks: about 70 s); there the launch
// geometry is checked instead (tests/cuda/launch_geometry_test.cc).
TEST_F(CudaBackendTest, QkNormRopePastTheGridYLimit) {
  if (cuda_test::kEmulated) GTEST_SKIP() << "GPU only; the geometry is checked by launch_geometry_test";
  SEED_TRACE();
  const AttentionShape shape{1, 1, 8};
  const int32_t T = 65535 + 2;
  const int64_t hd = shape.head_dim, max_pos = T;
  const std::vector<float> rope = RopeTable(max_pos, hd);
  Buffer rc = Upload(*cpu_, rope, {max_pos, hd}, DType::kF32), rg = Upload(*gpu_, rope, {max_pos, hd}, DType::kF32);
  std::vector<float> qn = RandomBf16(rng_, hd, 0.2f), kn = RandomBf16(rng_, hd, 0.2f);
  Buffer qnc = Upload(*cpu_, qn, {hd}), qng = Upload(*gpu_, qn, {hd});
  Buffer knc = Upload(*cpu_, kn, {hd}), kng = Upload(*gpu_, kn, {hd});
  SeqPart p{T, T, {}};
  for (int32_t b = 0; b < (T + 15) / 16; ++b) p.blocks.push_back(b);
  StepBatch step = RandomStep({p}, 16, rng_, 100);
  Begin(step, static_cast<int64_t>(p.blocks.size()), 16, max_pos);
  const std::vector<float> qkv = RandomBf16(rng_, int64_t{T} * shape.qkv_width());
  Buffer c = Upload(*cpu_, qkv, {T, shape.qkv_width()}), g = Upload(*gpu_, qkv, {T, shape.qkv_width()});
  cpu_->QkNormRope(c.tensor(), shape, &qnc.tensor(), &knc.tensor(), 1e-6f, rc);
  gpu_->QkNormRope(g.tensor(), shape, &qng.tensor(), &kng.tensor(), 1e-6f, rg);
  ExpectClose(Download(*gpu_, g), Download(*cpu_, c), kTol, "T=" + std::to_string(T));
}

TEST_F(CudaBackendTest, SiluMul) {
  SEED_TRACE();
  for (int64_t m : {1, 3, 111}) {
    for (int64_t f : kOddSizes) {
      const std::vector<float> gu = RandomBf16(rng_, m * 2 * f, 2.f);
      Buffer c = Upload(*cpu_, gu, {m, 2 * f}), g = Upload(*gpu_, gu, {m, 2 * f});
      Buffer oc = Output(*cpu_, {m, f}), og = Output(*gpu_, {m, f});
      cpu_->SiluMul(c, oc.tensor());
      gpu_->SiluMul(g, og.tensor());
      ExpectClose(Download(*gpu_, og), Download(*cpu_, oc), kTol,
                  "M=" + std::to_string(m) + " F=" + std::to_string(f));
    }
  }
}

TEST_F(CudaBackendTest, GatherRows) {
  SEED_TRACE();
  for (int64_t d : {int64_t{1}, int64_t{19}, cuda_test::kLargeDim}) {
    // Three prefill sequences and two decodes: the gathered rows are their last tokens.
    StepBatch step = RandomStep({{5, 5, {0}}, {1, 1, {1}}, {19, 19, {2, 3}}, {7, 1, {4}}, {12, 1, {5}}}, 16, rng_, 50);
    Begin(step, 6, 16, 64);
    const int64_t T = step.view().num_tokens(), S = step.view().num_seqs();
    const std::vector<float> x = RandomBf16(rng_, T * d);
    Buffer xc = Upload(*cpu_, x, {T, d}), xg = Upload(*gpu_, x, {T, d});
    Buffer oc = Output(*cpu_, {S, d}), og = Output(*gpu_, {S, d});
    cpu_->GatherRows(xc, oc.tensor());
    gpu_->GatherRows(xg, og.tensor());
    EXPECT_EQ(Download(*gpu_, og), Download(*cpu_, oc)) << "D=" << d;
  }
}

// A mixed batch: prefills from 0, prefills after a cached prefix (chunked), decodes.
struct AttentionCase {
  AttentionShape shape;
  int32_t block_size;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "Hq" << c.shape.num_heads << "_Hkv" << c.shape.num_kv_heads << "_hd" << c.shape.head_dim
      << "_bs" << c.block_size;
}

class CudaAttentionTest : public CudaBackendTest, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(CudaAttentionTest, StoreKvAndAttentionOnAMixedBatch) {
  SEED_TRACE();
  const AttentionShape shape = GetParam().shape;
  const int32_t bs = GetParam().block_size;
  // (seq_len, new tokens): prefill from 0, prefill after a cached prefix, decodes of odd lengths.
  const std::vector<std::pair<int32_t, int32_t>> seqs = {
      {19, 19}, {1, 1}, {111, 7}, {600, 3}, {1, 1}, {3, 1}, {7, 1}, {111, 1}, {cuda_test::kLongContext, 1}};
  std::vector<int32_t> lens;
  for (auto [len, n] : seqs) lens.push_back(len);
  int64_t num_blocks = 0;
  for (int32_t len : lens) num_blocks += (len + bs - 1) / bs;
  num_blocks += 3;  // unused blocks hold garbage nobody may read
  const auto blocks = cuda_test::DealBlocks(lens, bs, num_blocks, rng_);
  std::vector<SeqPart> parts;
  for (size_t i = 0; i < seqs.size(); ++i) parts.push_back({seqs[i].first, seqs[i].second, blocks[i]});
  // {1, 1} sits among the decodes but is a prefill (a fresh 1-token prompt): keep prefills first.
  std::stable_partition(parts.begin(), parts.end(), [](const SeqPart& p) { return p.n_new > 1 || p.seq_len == p.n_new; });
  StepBatch step = RandomStep(parts, bs, rng_, 100);
  step.mutable_arrays().slot_mapping[2] = -1;  // a padding token: its K/V must not be stored
  Begin(step, num_blocks, bs, 5000);

  const int64_t T = step.view().num_tokens(), hd = shape.head_dim, hkv = shape.num_kv_heads;
  const std::vector<float> cache_k = RandomBf16(rng_, num_blocks * bs * hkv * hd);
  const std::vector<float> cache_v = RandomBf16(rng_, num_blocks * bs * hkv * hd);
  const std::vector<float> qkv = RandomBf16(rng_, T * shape.qkv_width());
  Buffer kc = Upload(*cpu_, cache_k, {num_blocks, bs, hkv, hd}), kg = Upload(*gpu_, cache_k, {num_blocks, bs, hkv, hd});
  Buffer vc = Upload(*cpu_, cache_v, {num_blocks, bs, hkv, hd}), vg = Upload(*gpu_, cache_v, {num_blocks, bs, hkv, hd});
  Buffer qc = Upload(*cpu_, qkv, {T, shape.qkv_width()}), qg = Upload(*gpu_, qkv, {T, shape.qkv_width()});
  const KvCacheLayer cpu_cache{kc.tensor(), vc.tensor()}, gpu_cache{kg.tensor(), vg.tensor()};

  cpu_->StoreKv(qc, shape, cpu_cache);
  gpu_->StoreKv(qg, shape, gpu_cache);
  EXPECT_EQ(Download(*gpu_, kg), Download(*cpu_, kc)) << "K cache after StoreKv";
  EXPECT_EQ(Download(*gpu_, vg), Download(*cpu_, vc)) << "V cache after StoreKv";

  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  Buffer oc = Output(*cpu_, {T, shape.num_heads * hd}), og = Output(*gpu_, {T, shape.num_heads * hd});
  cpu_->Attention(qc, shape, cpu_cache, scale, oc.tensor());
  gpu_->Attention(qg, shape, gpu_cache, scale, og.tensor());
  ExpectClose(Download(*gpu_, og), Download(*cpu_, oc), kTol, "Attention");
}

// Speculative verification (backend/step.h, issue 27): decoding sequences
// that carry their last token and k proposed ones, k + 1 queries at the
// consecutive positions after a long cached context, beside plain decodes.
// They are multi-token sequences of the prefill group, so they reach the
// prefill kernels; each row matches the CPU. GatherRows then takes every
// verification row (R > S logits rows) as the CPU does.
TEST_P(CudaAttentionTest, VerificationQueriesOfDecodingSequences) {
  SEED_TRACE();
  const AttentionShape shape = GetParam().shape;
  const int32_t bs = GetParam().block_size;
  // (seq_len, new tokens): k + 1 = 2, 5 and 9 queries after contexts of odd lengths, then decodes.
  const std::vector<std::pair<int32_t, int32_t>> seqs = {
      {cuda_test::kLongContext + 4, 5}, {3, 2}, {118, 9}, {605, 5}, {7, 1}, {111, 1}};
  std::vector<int32_t> lens;
  for (auto [len, n] : seqs) lens.push_back(len);
  int64_t num_blocks = 2;
  for (int32_t len : lens) num_blocks += (len + bs - 1) / bs;
  const auto blocks = cuda_test::DealBlocks(lens, bs, num_blocks, rng_);
  std::vector<SeqPart> parts;
  for (size_t i = 0; i < seqs.size(); ++i) parts.push_back({seqs[i].first, seqs[i].second, blocks[i]});
  StepBatch step = RandomStep(parts, bs, rng_, 100);
  Begin(step, num_blocks, bs, 5000);

  const int64_t T = step.view().num_tokens(), hd = shape.head_dim, hkv = shape.num_kv_heads;
  const std::vector<float> cache_k = RandomBf16(rng_, num_blocks * bs * hkv * hd);
  const std::vector<float> cache_v = RandomBf16(rng_, num_blocks * bs * hkv * hd);
  const std::vector<float> qkv = RandomBf16(rng_, T * shape.qkv_width());
  Buffer kc = Upload(*cpu_, cache_k, {num_blocks, bs, hkv, hd}), kg = Upload(*gpu_, cache_k, {num_blocks, bs, hkv, hd});
  Buffer vc = Upload(*cpu_, cache_v, {num_blocks, bs, hkv, hd}), vg = Upload(*gpu_, cache_v, {num_blocks, bs, hkv, hd});
  Buffer qc = Upload(*cpu_, qkv, {T, shape.qkv_width()}), qg = Upload(*gpu_, qkv, {T, shape.qkv_width()});
  const KvCacheLayer cpu_cache{kc.tensor(), vc.tensor()}, gpu_cache{kg.tensor(), vg.tensor()};
  cpu_->StoreKv(qc, shape, cpu_cache);
  gpu_->StoreKv(qg, shape, gpu_cache);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  Buffer oc = Output(*cpu_, {T, shape.num_heads * hd}), og = Output(*gpu_, {T, shape.num_heads * hd});
  cpu_->Attention(qc, shape, cpu_cache, scale, oc.tensor());
  gpu_->Attention(qg, shape, gpu_cache, scale, og.tensor());
  ExpectClose(Download(*gpu_, og), Download(*cpu_, oc), kTol, "Attention");

  // Every new token of a verifying sequence is a logits row; a decode's one.
  std::vector<int32_t>& rows = step.mutable_arrays().logits_indices;
  rows.clear();
  for (int32_t t = 0; t < step.view().query_start[4]; ++t) rows.push_back(t);
  for (int32_t s = 4; s < 6; ++s) rows.push_back(step.view().query_start[s]);
  Begin(step, num_blocks, bs, 5000);
  const int64_t R = std::ssize(rows), D = shape.num_heads * hd;
  Buffer gc = Output(*cpu_, {R, D}), gg = Output(*gpu_, {R, D});
  cpu_->GatherRows(oc, gc.tensor());
  gpu_->GatherRows(og, gg.tensor());
  ExpectClose(Download(*gpu_, gg), Download(*cpu_, gc), kTol, "GatherRows of the verification rows");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTest,
                         ::testing::Values(AttentionCase{{4, 2, 24}, 16},    // small hd, GQA 2
                                           AttentionCase{{8, 1, 64}, 7},     // MQA, odd block size
                                           AttentionCase{{16, 8, 128}, 16},  // Qwen3-0.6B geometry
                                           AttentionCase{{12, 12, 128}, 1},  // MHA, one-token blocks
                                           AttentionCase{{20, 1, 64}, 32},   // group 20: three head chunks
                                           AttentionCase{{2, 1, 256}, 16})); // largest hd

// Decode attention (one new token, the rest cached) gives what prefill gave for
// the same token over the same context.
TEST_F(CudaBackendTest, DecodeAttentionMatchesPrefillAttention) {
  SEED_TRACE();
  const AttentionShape shape{8, 2, 128};
  const int32_t bs = 16;
  for (int32_t len : {1, 3, 19, 111, cuda_test::kLongPrefill}) {
    const int64_t num_blocks = (len + bs - 1) / bs + 2;
    const auto blocks = cuda_test::DealBlocks({len}, bs, num_blocks, rng_);
    StepBatch prefill = RandomStep({{len, len, blocks[0]}}, bs, rng_, 100);
    const int64_t T = len, hd = shape.head_dim, width = shape.qkv_width();
    const std::vector<float> qkv = RandomBf16(rng_, T * width);
    Buffer k = Output(*gpu_, {num_blocks, bs, shape.num_kv_heads, hd});
    Buffer v = Output(*gpu_, {num_blocks, bs, shape.num_kv_heads, hd});
    const KvCacheLayer cache{k.tensor(), v.tensor()};
    Buffer q = Upload(*gpu_, qkv, {T, width});
    Buffer out = Output(*gpu_, {T, shape.num_heads * hd});
    ASSERT_TRUE(gpu_->BeginStep(prefill.view(), num_blocks, bs, 2000).ok());
    gpu_->StoreKv(q, shape, cache);
    gpu_->Attention(q, shape, cache, 0.1f, out.tensor());
    const std::vector<float> all = Download(*gpu_, out);
    const std::vector<float> last_prefill(all.end() - shape.num_heads * hd, all.end());

    StepBatch decode = RandomStep({{len, 1, blocks[0]}}, bs, rng_, 100);
    if (len == 1) continue;  // a one-token sequence is a prefill, covered above
    ASSERT_EQ(decode.view().num_decode_seqs, 1);
    ASSERT_TRUE(gpu_->BeginStep(decode.view(), num_blocks, bs, 2000).ok());
    Buffer q1 = Upload(*gpu_, std::vector<float>(qkv.end() - width, qkv.end()), {1, width});
    Buffer out1 = Output(*gpu_, {1, shape.num_heads * hd});
    gpu_->StoreKv(q1, shape, cache);  // the same K/V again
    gpu_->Attention(q1, shape, cache, 0.1f, out1.tensor());
    ExpectClose(Download(*gpu_, out1), last_prefill, kTol, "len=" + std::to_string(len));
  }
}

TEST_F(CudaBackendTest, BeginStepRejectsABlockIdOutsideTheCache) {
  StepBatch step = RandomStep({{5, 5, {7}}}, 16, rng_, 10);
  const absl::Status status = gpu_->BeginStep(step.view(), 4, 16, 100);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

}  // namespace
}  // namespace tpserve
