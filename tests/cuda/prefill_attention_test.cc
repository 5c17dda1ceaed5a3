// The tensor-core prefill attention (cuda/prefill_attention.cuh):
//   * the launcher against a double-precision host reference and the
//     reference kernel (LaunchPagedAttention) on one launch holding several
//     sequences of different lengths, cached prefixes (first position > 0,
//     diagonals that cross key tiles) and decode rows it must leave alone
//     (the output is NaN-poisoned first);
//   * the launcher on a 32,768-token prompt and a chunk after a 30,000-token
//     cached prefix, against the host reference on a sample of rows;
//   * the CUDA backend's Attention op under the fast kernel set (with and
//     without Reserve, whose fixed step layout holds the tiles) against the
//     CPU backend and the reference kernel set, on prefill-only and mixed
//     prefill + decode steps;
//   * a mixed step whose decode rows the fast decode kernel takes: its
//     prefill rows still go through the tensor-core kernel (bit for bit the
//     prefill-only step's rows, not the reference kernel's), within the
//     derived attention bound (cuda_test::HostAttentionRowBounded) of the
//     reference set and the CPU.
// Head dims 64 and 128; GQA groups 1, 2, 4, 8; block sizes 16 and 32, so page
// boundaries fall inside the 64-row query tiles and 64-key K/V tiles; prompt
// lengths 1 .. kLongPrefill. Built twice: label gpu (skips without a device)
// and label cuda-emu (tests/cuda_emu/, smaller sizes). Replay a failure with
// TPSERVE_TEST_SEED=<the printed seed>.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "cuda/attention.cuh"
#include "cuda/cuda_backend.h"
#include "cuda/prefill_attention.cuh"
#include "cuda/prefill_tiles.h"
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
using cuda_test::RandomBf16;
using cuda_test::RandomStep;
using cuda_test::SeqPart;
using cuda_test::Upload;

constexpr int32_t kLong = cuda_test::kLongPrefill;

struct Geometry {
  int hq, hkv, hd, block_size;
};

std::string Describe(const Geometry& g) {
  return "Hq=" + std::to_string(g.hq) + " Hkv=" + std::to_string(g.hkv) + " hd=" + std::to_string(g.hd) +
         " block_size=" + std::to_string(g.block_size);
}

// Every head dim, group and block size at least once; fewer in the emulator.
std::vector<Geometry> Geometries() {
  if (cuda_test::kEmulated) return {{2, 2, 64, 16}, {4, 2, 128, 32}, {4, 1, 64, 32}, {8, 1, 128, 16}};
  return {{2, 2, 64, 16},  {4, 4, 128, 32}, {4, 2, 128, 16}, {8, 4, 64, 32},
          {8, 2, 128, 32}, {4, 1, 64, 16},  {16, 2, 128, 16}, {16, 8, 128, 32}};
}

// A prefill sequence of the test step: `cached` positions already in the
// cache, then `n` new rows.
struct Prefill {
  int32_t cached, n;
};

// Lengths 1 .. kLong, tiles cut at 64 rows, diagonals crossing key tiles.
std::vector<Prefill> Prefills() {
  if (cuda_test::kEmulated) return {{0, 1}, {0, kLong}, {1, 63}, {30, 65}, {kLong + 3, 17}};
  return {{0, 1}, {0, kLong}, {1, 63}, {30, 65}, {64, 64}, {kLong + 3, 17}, {2000, 300}};
}

class PrefillAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPSERVE_REQUIRE_GPU();
    seed_ = cuda_test::TestSeed();
    rng_.seed(static_cast<uint32_t>(seed_));
  }
  uint64_t seed_ = 0;
  std::mt19937 rng_;
};

#define SEED_TRACE() SCOPED_TRACE(::testing::Message() << "TPSERVE_TEST_SEED=" << seed_)

// The launch's inputs: the prefills of Prefills(), then kDecodes decode rows.
constexpr int kDecodes = 2;

struct LaunchInputs {
  std::vector<int32_t> seq_lens, query_start{0}, positions, token_seq, tables;
  std::vector<std::vector<int32_t>> blocks;
  int32_t max_blocks = 1;
  int64_t num_blocks = 0;
  int32_t num_prefill_rows = 0;
};

// The prefills, then `decodes` decode rows of contexts 7, 57, ...
LaunchInputs MakeInputs(const Geometry& g, const std::vector<Prefill>& prefills, int decodes, std::mt19937& rng) {
  LaunchInputs in;
  for (const Prefill& p : prefills) in.seq_lens.push_back(p.cached + p.n);
  for (int i = 0; i < decodes; ++i) in.seq_lens.push_back(7 + 50 * i);
  in.num_blocks = 3;  // unused blocks hold garbage nobody may read
  for (int32_t len : in.seq_lens) in.num_blocks += (len + g.block_size - 1) / g.block_size;
  in.blocks = DealBlocks(in.seq_lens, g.block_size, in.num_blocks, rng);
  for (const auto& b : in.blocks) in.max_blocks = std::max(in.max_blocks, static_cast<int32_t>(b.size()));
  for (const auto& b : in.blocks) {
    std::vector<int32_t> row = b;
    row.resize(static_cast<size_t>(in.max_blocks), -1);
    in.tables.insert(in.tables.end(), row.begin(), row.end());
  }
  for (size_t s = 0; s < in.seq_lens.size(); ++s) {
    const bool decode = s >= prefills.size();
    const int32_t n = decode ? 1 : prefills[s].n, first = in.seq_lens[s] - n;
    for (int32_t i = 0; i < n; ++i) {
      in.positions.push_back(first + i);
      in.token_seq.push_back(static_cast<int32_t>(s));
    }
    in.query_start.push_back(in.query_start.back() + n);
  }
  in.num_prefill_rows = in.query_start[prefills.size()];
  return in;
}

// softmax(q · K · scale) · V in double for row t, head h, with the derived
// bounds of a kernel's error on it (cuda_test::HostAttentionRowBounded).
cuda_test::AttentionBounded HostAttention(const LaunchInputs& in, const Geometry& g, const std::vector<float>& qkv,
                                          const std::vector<float>& k, const std::vector<float>& v, float scale,
                                          int t, int h) {
  const int64_t width = int64_t{g.hq + 2 * g.hkv} * g.hd;
  const int s = in.token_seq[t];
  auto slot = [&](int j) { return int64_t{in.blocks[s][j / g.block_size]} * g.block_size + j % g.block_size; };
  return cuda_test::HostAttentionRowBounded(qkv.data() + t * width + int64_t{h} * g.hd, k, v, g.hkv, g.hd,
                                            h / (g.hq / g.hkv), in.positions[t] + 1, scale, slot);
}

// Which rows of a launch to check against the host reference: every row in
// the emulator; on a GPU, where the host loop would dominate, every
// `row_stride`-th row and the first and last row of every `tile_stride`-th
// tile and of the last tile.
struct RowSample {
  int row_stride = 7;
  int tile_stride = 1;
};

// The host reference on the sampled prefill rows of `got` ([P, Hq·hd]), and
// on the same rows `ref` (the reference kernel's, when given) against `got`:
// every element within its derived bound.
void CheckRowsAgainstHost(const LaunchInputs& in, const Geometry& g, const std::vector<float>& qkv,
                          const std::vector<float>& k, const std::vector<float>& v, float scale,
                          const std::vector<cuda::PrefillTile>& tiles, const std::vector<float>& got, RowSample sample,
                          const std::vector<float>* ref = nullptr) {
  const int P = in.num_prefill_rows;
  const int64_t out_width = int64_t{g.hq} * g.hd;
  std::vector<bool> check(static_cast<size_t>(P), cuda_test::kEmulated);
  for (int t = 0; t < P; t += sample.row_stride) check[t] = true;
  for (size_t i = 0; i < tiles.size(); ++i) {
    if (i % static_cast<size_t>(sample.tile_stride) != 0 && i + 1 != tiles.size()) continue;
    check[tiles[i].row_begin] = check[tiles[i].row_begin + tiles[i].rows - 1] = true;
  }
  for (int t = 0; t < P; ++t) {
    if (!check[t]) continue;
    std::vector<float> want, row(got.begin() + t * out_width, got.begin() + (t + 1) * out_width);
    std::vector<double> vs_host, vs_kernel;
    for (int h = 0; h < g.hq; ++h) {
      const cuda_test::AttentionBounded b = HostAttention(in, g, qkv, k, v, scale, t, h);
      for (size_t d = 0; d < b.out.size(); ++d) {
        want.push_back(static_cast<float>(b.out[d]));
        vs_host.push_back(b.gpu[d] + cuda_test::kF32Unit * std::abs(b.out[d]));  // want is rounded to float
        vs_kernel.push_back(2 * b.gpu[d]);
      }
    }
    const std::string what = Describe(g) + " row " + std::to_string(t) + " (position " +
                             std::to_string(in.positions[t]) + ")";
    cuda_test::ExpectWithinBound(row, want, vs_host, "vs host, " + what);
    if (ref != nullptr) {
      cuda_test::ExpectWithinBound(
          row, std::vector<float>(ref->begin() + t * out_width, ref->begin() + (t + 1) * out_width), vs_kernel,
          "tensor-core vs reference kernel, " + what);
    }
  }
}

// One launch of the tensor-core kernel over `prefills` and kDecodes decode
// rows (NaN-poisoned output: the decode rows must stay untouched), against
// the reference kernel (when `with_reference_kernel`) and, on the rows of
// `sample`, the host reference.
void CheckLauncher(const Geometry& g, const std::vector<Prefill>& prefills, bool with_reference_kernel,
                   RowSample sample, std::mt19937& rng) {
  const std::string what = Describe(g);
  const LaunchInputs in = MakeInputs(g, prefills, kDecodes, rng);
  const int T = static_cast<int>(in.positions.size()), P = in.num_prefill_rows;
  const int64_t width = int64_t{g.hq + 2 * g.hkv} * g.hd, out_width = int64_t{g.hq} * g.hd;
  const std::vector<float> qkv = RandomBf16(rng, T * width);
  const std::vector<float> k = RandomBf16(rng, in.num_blocks * g.block_size * g.hkv * g.hd);
  const std::vector<float> v = RandomBf16(rng, in.num_blocks * g.block_size * g.hkv * g.hd);
  const float scale = 1.f / std::sqrt(static_cast<float>(g.hd));

  const int num_prefill = static_cast<int>(prefills.size());
  std::vector<cuda::PrefillTile> tiles(static_cast<size_t>(cuda::PrefillTileCapacity(T, num_prefill + kDecodes,
                                                                                      cuda::kPrefillTileRows)));
  const int64_t num_tiles = cuda::PlanPrefillTiles(in.query_start.data(), in.positions.data(), num_prefill,
                                                   cuda::kPrefillTileRows, tiles.data(),
                                                   static_cast<int64_t>(tiles.size()));
  ASSERT_GT(num_tiles, 0) << what;
  tiles.resize(static_cast<size_t>(num_tiles));

  DeviceArray<uint16_t> d_qkv(qkv.size()), d_k(k.size()), d_v(v.size()), d_out{static_cast<size_t>(T * out_width)},
      d_ref{static_cast<size_t>(T * out_width)};
  DeviceArray<int32_t> d_seq{static_cast<size_t>(T)}, d_pos{static_cast<size_t>(T)}, d_tables{in.tables.size()};
  DeviceArray<cuda::PrefillTile> d_tiles(tiles.size());
  d_qkv.Upload(ToBf16(qkv));
  d_k.Upload(ToBf16(k));
  d_v.Upload(ToBf16(v));
  d_seq.Upload(in.token_seq);
  d_pos.Upload(in.positions);
  d_tables.Upload(in.tables);
  d_tiles.Upload(tiles);
  cuda::PagedAttentionArgs a;
  a.qkv = reinterpret_cast<const __nv_bfloat16*>(d_qkv.ptr);
  a.num_tokens = T;
  a.token_seq = d_seq.ptr;
  a.positions = d_pos.ptr;
  a.block_tables = d_tables.ptr;
  a.max_blocks_per_seq = in.max_blocks;
  a.block_size = g.block_size;
  a.num_heads = g.hq;
  a.num_kv_heads = g.hkv;
  a.head_dim = g.hd;
  a.scale = scale;
  a.k_cache = reinterpret_cast<const __nv_bfloat16*>(d_k.ptr);
  a.v_cache = reinterpret_cast<const __nv_bfloat16*>(d_v.ptr);

  if (with_reference_kernel) {
    d_ref.Poison();
    a.out = reinterpret_cast<__nv_bfloat16*>(d_ref.ptr);
    ASSERT_EQ(cuda::LaunchPagedAttention(a, nullptr), cudaSuccess) << what;
  }
  d_out.Poison();
  a.out = reinterpret_cast<__nv_bfloat16*>(d_out.ptr);
  ASSERT_EQ(cuda::LaunchPrefillAttention(a, d_tiles.ptr, num_tiles, nullptr), cudaSuccess) << what;
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> raw = d_out.Download();
  for (int64_t e = P * out_width; e < T * out_width; ++e) {
    ASSERT_EQ(raw[e], 0xffff) << what << ": decode row " << e / out_width << " was written";
  }
  const std::vector<float> all = FromBf16(raw);
  const std::vector<float> got(all.begin(), all.begin() + P * out_width);
  std::vector<float> ref;
  if (with_reference_kernel) {
    const std::vector<float> ref_all = FromBf16(d_ref.Download());
    ref.assign(ref_all.begin(), ref_all.begin() + P * out_width);
  }
  // The sampled rows (every row in the emulator) against the host and the
  // reference kernel, within their derived bounds.
  CheckRowsAgainstHost(in, g, qkv, k, v, scale, tiles, got, sample, with_reference_kernel ? &ref : nullptr);
}

TEST_F(PrefillAttentionTest, LauncherMatchesHostReferenceAndReferenceKernel) {
  SEED_TRACE();
  for (const Geometry& g : Geometries()) {
    CheckLauncher(g, Prefills(), /*with_reference_kernel=*/true, RowSample{}, rng_);
    if (HasFatalFailure()) return;
  }
}

// A 32,768-token prompt and a 2,768-token chunk after a 30,000-token cached
// prefix, at Qwen3-0.6B's (tp 2) and Llama-3.2-1B's (tp 2) head shapes,
// against the host reference on a sample of rows (the reference kernel would
// take seconds here). The emulator runs the same case at 3 x kLongPrefill.
TEST_F(PrefillAttentionTest, LauncherAtPromptsOf32kTokens) {
  SEED_TRACE();
  const int32_t n = cuda_test::kEmulated ? 3 * kLong : 32768, cached = cuda_test::kEmulated ? 2 * kLong : 30000;
  const std::vector<Prefill> prefills = {{0, n}, {cached, n - cached}};
  const std::vector<Geometry> geometries =
      cuda_test::kEmulated ? std::vector<Geometry>{{4, 2, 64, 32}} : std::vector<Geometry>{{8, 4, 128, 16}, {16, 4, 64, 32}};
  for (const Geometry& g : geometries) {
    CheckLauncher(g, prefills, /*with_reference_kernel=*/false, RowSample{4099, 128}, rng_);
    if (HasFatalFailure()) return;
  }
}

TEST_F(PrefillAttentionTest, LauncherRefusesHeadDimsItDoesNotCover) {
  cuda::PagedAttentionArgs a;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.block_size = 16;
  cuda::PrefillTile* tiles = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&tiles), sizeof(cuda::PrefillTile)));
  for (int hd : {32, 96, 256}) {
    a.head_dim = hd;
    EXPECT_FALSE(cuda::PrefillAttentionCovers(hd));
    EXPECT_EQ(cuda::LaunchPrefillAttention(a, tiles, 1, nullptr), cudaErrorInvalidValue) << "hd " << hd;
  }
  a.head_dim = 128;
  EXPECT_EQ(cuda::LaunchPrefillAttention(a, nullptr, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchPrefillAttention(a, nullptr, 0, nullptr), cudaSuccess);  // nothing to run
  CUDA_CHECK(cudaFree(tiles));
}

// ---- the backend's Attention op ----

class PrefillAttentionBackendTest : public PrefillAttentionTest {
 protected:
  // StoreKv + Attention of `parts` (the first num_prefill in prefill) on the
  // CPU backend, the reference kernel set, and the fast set without and with
  // Reserve; compares each CUDA result with the CPU's and the fast with the
  // reference, row by row.
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

    std::unique_ptr<Backend> backends[] = {MakeCpuBackend(), MakeCudaBackend(0, cuda::KernelSet::kReference),
                                           MakeCudaBackend(0, cuda::KernelSet::kFast),
                                           MakeCudaBackend(0, cuda::KernelSet::kFast)};
    StepCapacity capacity;
    capacity.max_tokens = 4 * kLong;
    capacity.max_seqs = 16;
    capacity.max_context = 4 * kLong;
    capacity.block_size = bs;
    capacity.max_query_heads = g.hq;
    capacity.max_head_dim = g.hd;
    ASSERT_TRUE(backends[3]->Reserve(capacity).ok()) << what;
    ASSERT_LE(step.view().num_tokens(), capacity.max_tokens) << what;
    for (auto& b : backends) {
      const absl::Status st = b->BeginStep(step.view(), num_blocks, bs, 8192);
      ASSERT_TRUE(st.ok()) << what << " " << b->name() << ": " << st;
    }
    const AttentionShape shape{g.hq, g.hkv, g.hd};
    const int64_t T = step.view().num_tokens(), hd = g.hd, w = int64_t{g.hq} * hd;
    const std::vector<float> k = RandomBf16(rng_, num_blocks * bs * g.hkv * hd);
    const std::vector<float> v = RandomBf16(rng_, num_blocks * bs * g.hkv * hd);
    const std::vector<float> qkv = RandomBf16(rng_, T * shape.qkv_width());
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    std::vector<std::vector<float>> results;
    for (auto& b : backends) {
      Buffer kb = Upload(*b, k, {num_blocks, bs, g.hkv, hd}), vb = Upload(*b, v, {num_blocks, bs, g.hkv, hd});
      Buffer q = Upload(*b, qkv, {T, shape.qkv_width()});
      const KvCacheLayer cache{kb.tensor(), vb.tensor()};
      Buffer out = Output(*b, {T, w});
      b->StoreKv(q, shape, cache);
      b->Attention(q, shape, cache, scale, out.tensor());
      results.push_back(Download(*b, out));
    }
    // Every element within its derived bound (HostAttentionRowBounded): a
    // short prompt cannot hide behind the long ones.
    const cuda_test::AttentionBounded want =
        cuda_test::HostStepAttention(parts, bs, shape, qkv, k, v, scale, /*store_kv=*/true);
    ASSERT_EQ(static_cast<int64_t>(want.out.size()), T * w) << what;
    const std::vector<double> vs_cpu = cuda_test::Plus(want.gpu, want.cpu), vs_kernel = cuda_test::Plus(want.gpu, want.gpu);
    const char* names[] = {"cpu", "reference kernels", "fast kernels", "fast kernels after Reserve"};
    for (int i = 1; i < 4; ++i) {
      cuda_test::ExpectWithinBound(results[i], results[0], vs_cpu, std::string(names[i]) + " vs CPU, " + what);
    }
    for (int i = 2; i < 4; ++i) {
      cuda_test::ExpectWithinBound(results[i], results[1], vs_kernel,
                                   std::string(names[i]) + " vs reference kernels, " + what);
    }
  }
};

TEST_F(PrefillAttentionBackendTest, PrefillAndMixedStepsMatchCpuAndReferenceKernels) {
  SEED_TRACE();
  std::vector<Geometry> geometries = Geometries();
  if (cuda_test::kEmulated) geometries = {geometries.front(), geometries.back()};  // hd 64 and 128, GQA 1 and 8
  for (const Geometry& g : geometries) {
    // Prompts of several lengths, two with cached prefixes, then two decodes.
    const std::vector<Prefill> prefills = {{0, kLong}, {0, 1}, {20, 45}, {kLong - 30, 70}};
    std::vector<int32_t> lens;
    for (const Prefill& p : prefills) lens.push_back(p.cached + p.n);
    lens.push_back(9);
    lens.push_back(kLong + 40);
    int64_t total_blocks = 0;
    for (int32_t len : lens) total_blocks += (len + g.block_size - 1) / g.block_size;
    const auto blocks = DealBlocks(lens, g.block_size, total_blocks, rng_);
    std::vector<SeqPart> parts;
    for (size_t i = 0; i < prefills.size(); ++i) parts.push_back({lens[i], prefills[i].n, blocks[i]});
    RunAndCompare(parts, static_cast<int32_t>(parts.size()), g, "prefill-only " + Describe(g));
    if (HasFatalFailure()) return;
    parts.push_back({lens[4], 1, blocks[4]});
    parts.push_back({lens[5], 1, blocks[5]});
    RunAndCompare(parts, static_cast<int32_t>(prefills.size()), g, "mixed " + Describe(g));
    if (HasFatalFailure()) return;
  }
}

// StoreKv + Attention of `step` on `b` over the caches `k`, `v` ([num_blocks,
// bs, Hkv, hd]) and the step's q/k/v rows `qkv`: the output rows.
std::vector<float> StepAttention(Backend& b, const StepBatch& step, const Geometry& g, int64_t num_blocks,
                                 const std::vector<float>& k, const std::vector<float>& v,
                                 const std::vector<float>& qkv) {
  const AttentionShape shape{g.hq, g.hkv, g.hd};
  const int64_t T = step.view().num_tokens();
  EXPECT_TRUE(b.BeginStep(step.view(), num_blocks, g.block_size, 8192).ok()) << b.name();
  Buffer kb = Upload(b, k, {num_blocks, g.block_size, g.hkv, g.hd});
  Buffer vb = Upload(b, v, {num_blocks, g.block_size, g.hkv, g.hd});
  Buffer q = Upload(b, std::vector<float>(qkv.begin(), qkv.begin() + T * shape.qkv_width()), {T, shape.qkv_width()});
  const KvCacheLayer cache{kb.tensor(), vb.tensor()};
  Buffer out = Output(b, {T, int64_t{g.hq} * g.hd});
  b.StoreKv(q, shape, cache);
  b.Attention(q, shape, cache, 1.f / std::sqrt(static_cast<float>(g.hd)), out.tensor());
  return Download(b, out);
}

// A mixed step (prefills, then decodes the fast decode kernel covers) on the
// fast set, with and without Reserve: its prefill rows are those of the
// prefill-only step bit for bit (the tensor-core kernel's rows do not depend
// on the rest of the step) and not the reference kernel's (which rounds
// differently: P is bf16 on the tensor cores), so a mixed step that fell back
// to the reference kernel fails here; every element is within its derived
// bound (HostAttentionRowBounded) of the reference set and the CPU.
TEST_F(PrefillAttentionBackendTest, MixedStepPrefillRowsTakeTheTensorCoreKernel) {
  SEED_TRACE();
  for (const Geometry& g : Geometries()) {
    const std::string what = Describe(g);
    const std::vector<Prefill> prefills = {{0, kLong}, {20, 45}};
    const std::vector<int32_t> lens = {kLong, 65, 9, kLong + 40};  // the prefills, then two decodes
    int64_t num_blocks = 3;
    for (int32_t len : lens) num_blocks += (len + g.block_size - 1) / g.block_size;
    const auto blocks = DealBlocks(lens, g.block_size, num_blocks, rng_);
    std::vector<SeqPart> prefill_parts, mixed_parts;
    for (size_t i = 0; i < prefills.size(); ++i) prefill_parts.push_back({lens[i], prefills[i].n, blocks[i]});
    mixed_parts = prefill_parts;
    mixed_parts.push_back({lens[2], 1, blocks[2]});
    mixed_parts.push_back({lens[3], 1, blocks[3]});
    StepBatch prefill_only = RandomStep(prefill_parts, g.block_size, rng_, 100);
    prefill_only.mutable_arrays().num_prefill_seqs = 2;
    prefill_only.mutable_arrays().num_decode_seqs = 0;
    StepBatch mixed = RandomStep(mixed_parts, g.block_size, rng_, 100);
    mixed.mutable_arrays().num_prefill_seqs = 2;
    mixed.mutable_arrays().num_decode_seqs = 2;
    const int64_t T = mixed.view().num_tokens(), P = prefill_only.view().num_tokens(), w = int64_t{g.hq} * g.hd;
    const AttentionShape shape{g.hq, g.hkv, g.hd};
    const std::vector<float> k = RandomBf16(rng_, num_blocks * g.block_size * g.hkv * g.hd);
    const std::vector<float> v = RandomBf16(rng_, num_blocks * g.block_size * g.hkv * g.hd);
    const std::vector<float> qkv = RandomBf16(rng_, T * shape.qkv_width());

    std::unique_ptr<Backend> cpu = MakeCpuBackend(), reference = MakeCudaBackend(0, cuda::KernelSet::kReference),
                             fast = MakeCudaBackend(0, cuda::KernelSet::kFast),
                             reserved = MakeCudaBackend(0, cuda::KernelSet::kFast);
    StepCapacity capacity;
    capacity.max_tokens = 4 * kLong;
    capacity.max_seqs = 16;
    capacity.max_context = 4 * kLong;
    capacity.block_size = g.block_size;
    capacity.max_query_heads = g.hq;
    capacity.max_head_dim = g.hd;
    ASSERT_TRUE(reserved->Reserve(capacity).ok()) << what;
    const std::vector<float> want = StepAttention(*cpu, mixed, g, num_blocks, k, v, qkv);
    const std::vector<float> ref = StepAttention(*reference, mixed, g, num_blocks, k, v, qkv);
    const cuda_test::AttentionBounded exact = cuda_test::HostStepAttention(
        mixed_parts, g.block_size, shape, qkv, k, v, 1.f / std::sqrt(static_cast<float>(g.hd)), /*store_kv=*/true);
    const std::vector<double> vs_cpu = cuda_test::Plus(exact.gpu, exact.cpu), vs_kernel = cuda_test::Plus(exact.gpu, exact.gpu);
    const std::vector<float> tensor_core = StepAttention(*fast, prefill_only, g, num_blocks, k, v, qkv);
    ASSERT_EQ(static_cast<int64_t>(tensor_core.size()), P * w) << what;
    for (Backend* b : {fast.get(), reserved.get()}) {
      const std::vector<float> got = StepAttention(*b, mixed, g, num_blocks, k, v, qkv);
      const std::string which = b == fast.get() ? " fast" : " fast after Reserve";
      cuda_test::ExpectWithinBound(got, want, vs_cpu, "mixed step vs CPU, " + what + which);
      cuda_test::ExpectWithinBound(got, ref, vs_kernel, "mixed step vs reference kernels, " + what + which);
      const std::vector<float> prefill_rows(got.begin(), got.begin() + P * w);
      EXPECT_TRUE(prefill_rows == tensor_core) << what << which << ": the mixed step's prefill rows are not the "
                                               << "tensor-core kernel's";
      EXPECT_FALSE(std::equal(prefill_rows.begin(), prefill_rows.end(), ref.begin()))
          << what << which << ": the mixed step's prefill rows are the reference kernel's";
    }
  }
}

}  // namespace
}  // namespace tpserve
