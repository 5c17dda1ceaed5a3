// A decoder layer in fewer launches (Backend::FusesLayerOps, cuda/gemv.cuh):
// each fused op of the CUDA backend's fast set against the unfused fast ops
// it stands for, bit for bit (the fused kernels run the same row math in the
// same order: cuda/norm_rope_rows.cuh), and whole models decoding with the
// fused layers against the same models without them, logits bit for bit:
//   * LinearAddResidual: the GEMV with the residual add in its epilogue
//     against Linear then AddRmsNorm's residual; y left unwritten; at M = 9
//     (cuBLAS accumulating into the residual) within a bound from the
//     arithmetic;
//   * RmsNormLinearSiluMul: the RMSNorm prologue (rows of 1 to 4 vectors a
//     thread of the vector RmsNorm, whose block of up to 1,024 threads the
//     GEMV's 256 play) with the gate/up + SiLU GEMV, against RmsNorm then
//     LinearSiluMul; the scratch left unwritten;
//   * the QKV GEMV with the RMSNorm prologue and the q/k norm + RoPE + K/V
//     store epilogue (the last block of a head finishing it), under every
//     split (1, 2, 4, 8 columns a block), with and without q/k norms and
//     bias, a padding row (slot -1), against RmsNormVec, the GEMV and the
//     fused q/k kernel: qkv and both caches; and through the backend after
//     Reserve, arrival counters left at zero for the next launch;
//   * whole Qwen3 and Llama models (2 layers), eagerly and through decode
//     graphs, on a backend that fuses and one that does not.
// Built twice: label gpu (skips without a device) and label cuda-emu.
// Replay a failure with TPSERVE_TEST_SEED=<the printed seed>.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/step_batch.h"
#include "comm/communicator.h"
#include "cuda/cuda_backend.h"
#include "cuda/gemv.cuh"
#include "cuda/qk_norm_rope.cuh"
#include "cuda/rmsnorm.cuh"
#include "model/config.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/cuda/test_model.h"
#include "tests/cuda/test_sizes.h"
#include "worker/engine.h"

namespace tpserve {
namespace {

using cuda_test::DealBlocks;
using cuda_test::Download;
using cuda_test::Output;
using cuda_test::RandomBf16;
using cuda_test::RandomStep;
using cuda_test::SeqPart;
using cuda_test::Upload;

constexpr float kEps = 1e-6f;
// bf16 rounding to nearest moves x by at most 2^-8·|x|; an fp32 sum of n + 1
// terms in any order is within γ_n = n·u / (1 − n·u) (u = 2^-24) of Σ|terms|
// of the exact sum (Higham).
constexpr double kBf16Rounding = 0x1p-8;
double Gamma(int64_t n) {
  const double nu = static_cast<double>(n) * 0x1p-24;
  return nu / (1 - nu);
}

class FusedLayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
    seed_ = cuda_test::TestSeed();
    rng_.seed(seed_);
    fast_ = MakeCudaBackend(0, cuda::KernelSet::kFast);
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<Backend> fast_;
};

#define SEED_TRACE() SCOPED_TRACE(::testing::Message() << "TPSERVE_TEST_SEED=" << seed_)

bool AllNan(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
}

__nv_bfloat16* Bf(const Buffer& b) { return static_cast<__nv_bfloat16*>(b.tensor().data); }

// Rows the vector RmsNorm gives 1, 2, 3 and 4 vectors a thread (D <= 8,192,
// <= 16,384, <= 24,576, <= 32,768) in blocks of fewer and more threads than
// the GEMV's 256; up to 2 vectors in the emulated run.
std::vector<int64_t> NormWidths() {
  if (cuda_test::kEmulated) return {8, 64, 2056, 8200};
  return {8, 64, 1024, 2056, 8200, 20000, 32768};
}

// residual += x · wᵀ (+ bias) through LinearAddResidual against Linear into y,
// then AddRmsNorm(y, residual) (whose residual is the sum; its normalised y is
// dropped): the same bits at M <= 8 (the GEMV's residual epilogue, y never
// written); M = 9 goes through cuBLAS accumulating into the residual, one
// rounding fewer, so within the bound of the two computations' roundings.
TEST_F(FusedLayerTest, LinearAddResidualGivesLinearThenAddRmsNormsAdd) {
  SEED_TRACE();
  for (int64_t m : {1, 3, 8, 9}) {
    for (int64_t k : {int64_t{8}, int64_t{72}, cuda_test::kLargeDim / 8 * 8}) {
      for (int64_t n : {int64_t{8}, int64_t{40}}) {
        for (bool with_bias : {false, true}) {
          const std::string what = "M=" + std::to_string(m) + " K=" + std::to_string(k) + " N=" + std::to_string(n) +
                                   (with_bias ? " bias" : "");
          const std::vector<float> x = RandomBf16(rng_, m * k), w = RandomBf16(rng_, n * k, 0.2f),
                                   b = RandomBf16(rng_, n), r = RandomBf16(rng_, m * n, 4.f),
                                   ones(static_cast<size_t>(n), 1.f);
          Buffer xg = Upload(*fast_, x, {m, k}), wg = Upload(*fast_, w, {n, k}), bg = Upload(*fast_, b, {n});
          Buffer fused_r = Upload(*fast_, r, {m, n}), two_r = Upload(*fast_, r, {m, n}), norm = Upload(*fast_, ones, {n});
          Buffer y = Output(*fast_, {m, n}), y2 = Output(*fast_, {m, n});
          const Tensor* bias = with_bias ? &bg.tensor() : nullptr;
          fast_->LinearAddResidual(xg, wg, bias, y.tensor(), fused_r.tensor());
          fast_->Linear(xg, wg, bias, y2.tensor());
          fast_->AddRmsNorm(y2.tensor(), two_r.tensor(), norm, kEps);
          const std::vector<float> got = Download(*fast_, fused_r), want = Download(*fast_, two_r);
          if (m <= cuda::kGemvMaxRows) {
            EXPECT_EQ(got, want) << what << ": the fused epilogue must give Linear + AddRmsNorm's residual";
            EXPECT_TRUE(AllNan(Download(*fast_, y))) << what << ": the fused GEMV wrote its scratch";
            continue;
          }
          // Per element: the exact value v = r + Σ x·w + b in double; A = Σ|x·w| + |b|.
          // Each side sums in fp32 (within γ_{k+1}·A) and rounds to bf16 at
          // most twice, values at most |r| + A(1 + γ): 2^-8 of that each.
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double a = with_bias ? std::abs(double{b[j]}) : 0.0;
              for (int64_t l = 0; l < k; ++l) a += std::abs(double{x[i * k + l]} * w[j * k + l]);
              const double g = Gamma(k + 1), mag = std::abs(double{r[i * n + j]}) + a * (1 + g);
              const double bound = 2 * g * a + 3 * kBf16Rounding * mag;
              EXPECT_LE(std::abs(double{got[i * n + j]} - want[i * n + j]), bound) << what << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

// RmsNormLinearSiluMul against RmsNorm then LinearSiluMul on the same backend
// (Backend's default, the unfused fast ops): the same bits; the fused op
// leaves x_normed and gate_up unwritten.
TEST_F(FusedLayerTest, RmsNormLinearSiluMulGivesRmsNormThenLinearSiluMul) {
  SEED_TRACE();
  for (int64_t k : NormWidths()) {
    for (int64_t m : {1, 4, 8}) {
      if (k > 2056 && m == 4) continue;  // the widest rows at the edges of M only (the emulated run's time)
      for (int64_t f : {int64_t{3}, int64_t{19}}) {
        const std::string what = "M=" + std::to_string(m) + " K=" + std::to_string(k) + " F=" + std::to_string(f);
        const std::vector<float> x = RandomBf16(rng_, m * k, 3.f), norm = RandomBf16(rng_, k),
                                 w = RandomBf16(rng_, 2 * f * k, 0.2f);
        Buffer xg = Upload(*fast_, x, {m, k}), ng = Upload(*fast_, norm, {k}), wg = Upload(*fast_, w, {2 * f, k});
        Buffer xn = Output(*fast_, {m, k}), gu = Output(*fast_, {m, 2 * f}), out = Output(*fast_, {m, f});
        Buffer xn2 = Output(*fast_, {m, k}), gu2 = Output(*fast_, {m, 2 * f}), out2 = Output(*fast_, {m, f});
        fast_->RmsNormLinearSiluMul(xg, ng, kEps, xn.tensor(), wg, gu.tensor(), out.tensor());
        fast_->Backend::RmsNormLinearSiluMul(xg, ng, kEps, xn2.tensor(), wg, gu2.tensor(), out2.tensor());
        const std::vector<float> got = Download(*fast_, out);
        EXPECT_FALSE(std::any_of(got.begin(), got.end(), [](float v) { return std::isnan(v); })) << what;
        EXPECT_EQ(got, Download(*fast_, out2)) << what << ": the fused op must give RmsNorm + LinearSiluMul's bits";
        EXPECT_TRUE(AllNan(Download(*fast_, xn))) << what << ": the fused GEMV wrote x_normed";
        EXPECT_TRUE(AllNan(Download(*fast_, gu))) << what << ": the fused GEMV wrote gate_up";
      }
    }
  }
}

// A QKV geometry of the launcher test.
struct QkvGeometry {
  int hq, hkv, hd;
  bool norms, bias;
};

std::string Describe(const QkvGeometry& g) {
  return "Hq=" + std::to_string(g.hq) + " Hkv=" + std::to_string(g.hkv) + " hd=" + std::to_string(g.hd) +
         (g.norms ? " q/k norms" : "") + (g.bias ? " bias" : "");
}

// LaunchRmsNormGemvQkRope under every split against the unfused kernels under
// the same split: LaunchRmsNormVec, LaunchGemv, LaunchQkNormRopeStoreKv. M
// tokens at scattered positions, the last one padding (slot -1: stored by
// neither). qkv and both caches compared bit for bit (the caches start as the
// same random values, so an unwritten or stray slot shows too).
TEST_F(FusedLayerTest, QkvGemvWithNormAndRopeEpilogueGivesTheUnfusedKernelsBitsUnderEverySplit) {
  SEED_TRACE();
  const auto stream = static_cast<cudaStream_t>(fast_->stream());
  const QkvGeometry geometries[] = {{4, 2, 64, true, false}, {2, 1, 128, false, true}, {8, 8, 16, true, true}};
  const int64_t k = 72, max_position = 64, slots = 40;
  for (const QkvGeometry& g : geometries) {
    const int64_t n = int64_t{g.hq + 2 * g.hkv} * g.hd, kv_row = int64_t{g.hkv} * g.hd;
    std::vector<float> rope(static_cast<size_t>(max_position * g.hd));
    for (int64_t p = 0; p < max_position; ++p) {
      for (int i = 0; i < g.hd / 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * i / g.hd);
        rope[static_cast<size_t>(p * g.hd + i)] = static_cast<float>(std::cos(angle));
        rope[static_cast<size_t>(p * g.hd + g.hd / 2 + i)] = static_cast<float>(std::sin(angle));
      }
    }
    for (int64_t m : {1, 3, 8}) {
      for (int cols : {1, 2, 4, 8}) {
        const std::string what = Describe(g) + " M=" + std::to_string(m) + " cols=" + std::to_string(cols);
        const std::vector<float> x = RandomBf16(rng_, m * k, 3.f), norm = RandomBf16(rng_, k),
                                 w = RandomBf16(rng_, n * k, 0.2f), b = RandomBf16(rng_, n),
                                 qn = RandomBf16(rng_, g.hd), kn = RandomBf16(rng_, g.hd),
                                 cache = RandomBf16(rng_, slots * kv_row);
        std::vector<int32_t> positions;
        std::vector<int64_t> slot_mapping;
        for (int64_t t = 0; t < m; ++t) {
          positions.push_back(static_cast<int32_t>((t * 29 + 5) % max_position));
          slot_mapping.push_back(t + 1 == m && m > 1 ? -1 : (t * 7 + 3) % slots);
        }
        Buffer xg = Upload(*fast_, x, {m, k}), ng = Upload(*fast_, norm, {k}), wg = Upload(*fast_, w, {n, k}),
               bg = Upload(*fast_, b, {n}), qng = Upload(*fast_, qn, {g.hd}), kng = Upload(*fast_, kn, {g.hd});
        Buffer rg = Upload(*fast_, rope, {max_position, g.hd}, DType::kF32);
        Buffer kc[2] = {Upload(*fast_, cache, {slots, kv_row}), Upload(*fast_, cache, {slots, kv_row})};
        Buffer vc[2] = {Upload(*fast_, RandomBf16(rng_, slots * kv_row), {slots, kv_row}), Buffer()};
        vc[1] = Upload(*fast_, Download(*fast_, vc[0]), {slots, kv_row});
        Buffer qkv[2] = {Output(*fast_, {m, n}), Output(*fast_, {m, n})}, xn = Output(*fast_, {m, k});
        cuda_test::DeviceArray<int32_t> pos(positions.size());
        cuda_test::DeviceArray<int64_t> slot(slot_mapping.size());
        cuda_test::DeviceArray<uint32_t> arrivals(static_cast<size_t>(g.hq + g.hkv));
        pos.Upload(positions);
        slot.Upload(slot_mapping);
        arrivals.Upload(std::vector<uint32_t>(arrivals.n, 0));
        const cuda::GemvPlan plan{cols, cuda::kGemvWarps / cols, (n + cols - 1) / cols};
        const __nv_bfloat16* q_norm = g.norms ? Bf(qng) : nullptr;
        const __nv_bfloat16* k_norm = g.norms ? Bf(kng) : nullptr;
        const __nv_bfloat16* bias = g.bias ? Bf(bg) : nullptr;
        cuda::GemvQkRope qk;
        qk.num_heads = g.hq, qk.num_kv_heads = g.hkv, qk.head_dim = g.hd, qk.positions = pos.ptr;
        qk.slot_mapping = slot.ptr, qk.q_norm = q_norm, qk.k_norm = k_norm, qk.eps = kEps;
        qk.rope = static_cast<const float*>(rg.tensor().data), qk.k_cache = Bf(kc[0]), qk.v_cache = Bf(vc[0]);
        qk.arrivals = arrivals.ptr;
        ASSERT_EQ(cuda::LaunchRmsNormGemvQkRope(Bf(xg), Bf(ng), kEps, Bf(wg), bias, m, n, k, Bf(qkv[0]), qk, plan,
                                                stream),
                  cudaSuccess) << what;
        ASSERT_EQ(cuda::LaunchRmsNormVec(Bf(xg), Bf(ng), kEps, m, k, Bf(xn), stream), cudaSuccess) << what;
        ASSERT_EQ(cuda::LaunchGemv(Bf(xn), Bf(wg), bias, m, n, k, Bf(qkv[1]), plan, stream), cudaSuccess) << what;
        ASSERT_EQ(cuda::LaunchQkNormRopeStoreKv(Bf(qkv[1]), m, pos.ptr, slot.ptr, g.hq, g.hkv, g.hd, q_norm, k_norm,
                                                kEps, qk.rope, Bf(kc[1]), Bf(vc[1]), stream),
                  cudaSuccess) << what;
        fast_->Synchronize();
        EXPECT_EQ(Download(*fast_, qkv[0]), Download(*fast_, qkv[1])) << what << ": qkv";
        EXPECT_EQ(Download(*fast_, kc[0]), Download(*fast_, kc[1])) << what << ": K cache";
        EXPECT_EQ(Download(*fast_, vc[0]), Download(*fast_, vc[1])) << what << ": V cache";
        for (uint32_t c : arrivals.Download()) EXPECT_EQ(c, 0u) << what << ": an arrival counter left non-zero";
      }
    }
  }
  Buffer a = Output(*fast_, {8, 64});
  cuda::GemvQkRope qk;  // no step arrays, no counters
  qk.num_heads = 1, qk.num_kv_heads = 1, qk.head_dim = 8;
  EXPECT_EQ(cuda::LaunchRmsNormGemvQkRope(Bf(a), Bf(a), kEps, Bf(a), nullptr, 1, 24, 8, Bf(a), qk,
                                          cuda::PlanGemv(24, 8, 1), stream),
            cudaErrorInvalidValue);
}

// The backend's RmsNormQkvRopeStoreKv after Reserve (the fused GEMV, planned
// for this device) against Backend's default on the same backend (RmsNorm,
// Linear, QkNormRopeStoreKv), on a padded decode step of a graph bucket;
// qkv and caches bit for bit, the scratch unwritten; run twice, so a counter
// left over by the first launch would show in the second.
TEST_F(FusedLayerTest, BackendQkvOpGivesTheUnfusedOpsBits) {
  SEED_TRACE();
  const int32_t bs = 16;
  for (const QkvGeometry& g : {QkvGeometry{8, 2, 128, true, false}, QkvGeometry{4, 4, 64, false, true}}) {
    const std::string what = Describe(g);
    const AttentionShape shape{g.hq, g.hkv, g.hd};
    const int64_t d = 256, n = shape.qkv_width();
    StepCapacity capacity;
    capacity.max_tokens = 8, capacity.max_seqs = 8, capacity.max_context = 512, capacity.block_size = bs;
    capacity.max_query_heads = g.hq, capacity.max_head_dim = g.hd;
    ASSERT_TRUE(fast_->Reserve(capacity).ok()) << what;
    ASSERT_TRUE(fast_->FusesLayerOps(3)) << what;
    EXPECT_FALSE(fast_->FusesLayerOps(cuda::kGemvMaxRows + 1)) << what << ": a prefill step runs the ops apart";
    const int64_t num_blocks = 40;
    const auto blocks = DealBlocks({100, 7, 300}, bs, num_blocks, rng_);
    StepBatch own = RandomStep({{100, 1, blocks[0]}, {7, 1, blocks[1]}, {300, 1, blocks[2]}}, bs, rng_, 100);
    own.mutable_arrays().num_prefill_seqs = 0;
    own.mutable_arrays().num_decode_seqs = 3;
    StepBatch step;  // bucket 4: a padding row, slot -1
    ASSERT_TRUE(step.AssignPaddedDecode(own.view(), 4, capacity.max_blocks_per_seq(), bs).ok()) << what;
    ASSERT_TRUE(fast_->BeginStep(step.view(), num_blocks, bs, 512).ok()) << what;
    const int64_t t = step.view().num_tokens();
    std::vector<float> rope(static_cast<size_t>(512 * g.hd));
    for (float& c : rope) c = static_cast<float>(std::uniform_real_distribution<double>(-1, 1)(rng_));
    const std::vector<float> x = RandomBf16(rng_, t * d, 3.f), norm = RandomBf16(rng_, d),
                             w = RandomBf16(rng_, n * d, 0.2f), b = RandomBf16(rng_, n), qn = RandomBf16(rng_, g.hd),
                             kn = RandomBf16(rng_, g.hd), kv = RandomBf16(rng_, num_blocks * bs * g.hkv * g.hd);
    Buffer xg = Upload(*fast_, x, {t, d}), ng = Upload(*fast_, norm, {d}), wg = Upload(*fast_, w, {n, d}),
           bg = Upload(*fast_, b, {n}), qng = Upload(*fast_, qn, {g.hd}), kng = Upload(*fast_, kn, {g.hd}),
           rg = Upload(*fast_, rope, {512, g.hd}, DType::kF32);
    for (int round = 0; round < 2; ++round) {
      const std::string each = what + " round " + std::to_string(round);
      Buffer kc[2], vc[2], qkv[2], xn[2];
      for (int i = 0; i < 2; ++i) {
        kc[i] = Upload(*fast_, kv, {num_blocks, bs, g.hkv, g.hd});
        vc[i] = Upload(*fast_, kv, {num_blocks, bs, g.hkv, g.hd});
        qkv[i] = Output(*fast_, {t, n});
        xn[i] = Output(*fast_, {t, d});
      }
      const Tensor* bias = g.bias ? &bg.tensor() : nullptr;
      const Tensor* q_norm = g.norms ? &qng.tensor() : nullptr;
      const Tensor* k_norm = g.norms ? &kng.tensor() : nullptr;
      fast_->RmsNormQkvRopeStoreKv(xg, ng, kEps, xn[0].tensor(), wg, bias, qkv[0].tensor(), shape, q_norm, k_norm, rg,
                                   KvCacheLayer{kc[0].tensor(), vc[0].tensor()});
      fast_->Backend::RmsNormQkvRopeStoreKv(xg, ng, kEps, xn[1].tensor(), wg, bias, qkv[1].tensor(), shape, q_norm,
                                            k_norm, rg, KvCacheLayer{kc[1].tensor(), vc[1].tensor()});
      EXPECT_EQ(Download(*fast_, qkv[0]), Download(*fast_, qkv[1])) << each << ": qkv";
      EXPECT_EQ(Download(*fast_, kc[0]), Download(*fast_, kc[1])) << each << ": K cache";
      EXPECT_EQ(Download(*fast_, vc[0]), Download(*fast_, vc[1])) << each << ": V cache";
      EXPECT_TRUE(AllNan(Download(*fast_, xn[0]))) << each << ": the fused GEMV wrote x_normed";
    }
  }
  std::unique_ptr<Backend> apart = MakeCudaBackend(0, cuda::KernelSet::kFast, true, /*fuse_layer_ops=*/false);
  std::unique_ptr<Backend> reference = MakeCudaBackend(0, cuda::KernelSet::kReference);
  StepCapacity capacity;
  capacity.max_tokens = 8, capacity.max_seqs = 8, capacity.max_context = 512, capacity.block_size = bs;
  capacity.max_query_heads = 8, capacity.max_head_dim = 128;
  ASSERT_TRUE(apart->Reserve(capacity).ok());
  ASSERT_TRUE(reference->Reserve(capacity).ok());
  EXPECT_FALSE(apart->FusesLayerOps(1)) << "fuse_layer_ops = false";
  EXPECT_FALSE(reference->FusesLayerOps(1)) << "the reference set never fuses";
}

// Whole models: 2-layer Qwen3 (q/k norms) and Llama (llama3 RoPE scaling),
// greedy decoding of three prompts through the Engine, eagerly and through
// decode graphs, on a fast backend that fuses the layers and one that does
// not: the same logits, bit for bit, at every step (prefill steps run the
// ops apart on both; decode steps of at most 8 tokens fused on one).
TEST_F(FusedLayerTest, WholeModelsGiveTheUnfusedLogits) {
  struct Preset {
    const char* name;
    const char* args;
  };
  const Preset presets[] = {
      {"qwen3", "--arch qwen3 --hidden 64 --intermediate 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 "
                "--vocab 301 --seed 71 --max-pos 512"},
      {"llama", "--arch llama --hidden 128 --intermediate 96 --layers 2 --heads 4 --kv-heads 2 --vocab 263 "
                "--seed 72 --max-pos 512 --rope-scaling llama3"},
  };
  for (const Preset& p : presets) {
    const std::filesystem::path dir = cuda_test::MakeTestModel("tpserve_fused_layer", p.name, p.args);
    absl::StatusOr<ModelConfig> config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    std::vector<GenerationRequest> requests;
    for (int len : {3, 17, 40}) {
      GenerationRequest r;
      for (int i = 0; i < len; ++i) r.prompt.push_back(static_cast<int32_t>((i * 37 + len) % config->vocab_size));
      r.sampling.temperature = 0.f;
      r.max_tokens = cuda_test::kModelDecodeSteps;
      r.ignore_eos = true;
      requests.push_back(std::move(r));
    }
    for (bool eager : {true, false}) {
      std::vector<GenerationResult> results[2];
      for (int fuse = 0; fuse < 2; ++fuse) {
        std::unique_ptr<Communicator> solo = MakeSoloCommunicator();
        std::unique_ptr<Backend> backend = MakeCudaBackend(0, cuda::KernelSet::kFast, true, fuse == 1);
        EngineOptions options;
        options.model.max_position = 512;
        options.model.max_num_seqs = 4;
        options.enforce_eager = eager;
        options.return_logits = true;
        absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(dir, *backend, *solo, options);
        ASSERT_TRUE(engine.ok()) << engine.status();
        absl::StatusOr<std::vector<GenerationResult>> r = (*engine)->Generate(requests);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(backend->FusesLayerOps(1), fuse == 1) << p.name;
        results[fuse] = *std::move(r);
      }
      ASSERT_EQ(results[0].size(), requests.size());
      ASSERT_EQ(results[1].size(), requests.size());
      for (size_t i = 0; i < requests.size(); ++i) {
        const std::string what = std::string(p.name) + (eager ? " eager" : " graphs") + " request " + std::to_string(i);
        EXPECT_EQ(results[1][i].tokens, results[0][i].tokens) << what;
        ASSERT_EQ(results[1][i].logits.size(), results[0][i].logits.size()) << what;
        for (size_t j = 0; j < results[0][i].logits.size(); ++j) {
          EXPECT_EQ(results[1][i].logits[j], results[0][i].logits[j]) << what << " step " << j;
        }
      }
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace tpserve
