// The kernel-level sections of gpu_bench (bench/gpu/gpu_bench.cc's top
// comment says what each measures): small-batch Linear and the fused MLP
// GEMV, decode attention (fast vs reference, and the fast kernel's variants),
// prefill attention, and the GPU sampler.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "bench/gpu/bench_util.h"
#include "cuda/attention.cuh"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_sampler.h"
#include "cuda/decode_attention.cuh"
#include "cuda/kernel_set.h"
#include "cuda/sampling.cuh"
#include "cuda/sampling_sliced.cuh"
#include "model/dtype.h"
#include "sampling/sampler.h"

namespace tpserve::gpu_bench {

// A step of `num_seqs` sequences with `new_tokens` new tokens each ending at
// position seq_len − 1; sequence s owns blocks [s · blocks_per_seq, ...).
StepBatch BenchStep(int32_t num_seqs, int32_t new_tokens, int32_t seq_len) {
  const int32_t blocks_per_seq = (seq_len + kBlockSize - 1) / kBlockSize;
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(num_seqs)), tables(static_cast<size_t>(num_seqs));
  std::vector<StepSequence> seqs;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const size_t i = static_cast<size_t>(s);
    for (int32_t pos = seq_len - new_tokens; pos < seq_len; ++pos) ids[i].push_back((s * 7919 + pos * 31) % 30000);
    for (int32_t b = 0; b < blocks_per_seq; ++b) tables[i].push_back(s * blocks_per_seq + b);
    seqs.push_back({ids[i], seq_len - new_tokens, tables[i]});
  }
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, kBlockSize);
  TPSERVE_CHECK(step.ok(), "BenchStep: ", step.status().message());
  return *std::move(step);
}

// Decode attention of one layer with Qwen3-0.6B's geometry (Hq 16, Hkv 8, hd
// 128, blocks of 16): the fast kernel (KernelSet::kFast after Reserve) beside
// the reference kernels' split path (after Reserve) and single kernel (a
// backend without), every sequence on its own blocks. The cache is zeros: the
// kernels' work does not depend on the values.
bool AttentionSplitSection(const Sizes& z, double bw, std::ostream& table) {
  const AttentionShape shape{16, 8, 128};
  const int32_t max_context = z.max_attention_context(), max_batch = z.max_attention_batch();
  std::unique_ptr<Backend> single = MakeCudaBackend(0, cuda::KernelSet::kReference),
                           split = MakeCudaBackend(0, cuda::KernelSet::kReference),
                           fast = MakeCudaBackend(0, cuda::KernelSet::kFast);
  StepCapacity capacity;
  capacity.max_tokens = max_batch;
  capacity.max_seqs = max_batch;
  capacity.max_context = max_context;
  capacity.block_size = kBlockSize;
  capacity.max_query_heads = shape.num_heads;
  capacity.max_head_dim = shape.head_dim;
  for (Backend* b : {split.get(), fast.get()}) {
    if (absl::Status st = b->Reserve(capacity); !st.ok()) {
      table << "\ndecode attention: Reserve failed on " << b->name() << ": " << st.ToString() << "\n";
      return false;
    }
  }
  const int64_t num_blocks = int64_t{max_batch} * ((max_context + kBlockSize - 1) / kBlockSize);
  Buffer k = split->Allocate(DType::kBF16, {num_blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer v = split->Allocate(DType::kBF16, {num_blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer qkv = split->Allocate(DType::kBF16, {max_batch, shape.qkv_width()});
  Buffer out = split->Allocate(DType::kBF16, {max_batch, int64_t{shape.num_heads} * shape.head_dim});
  split->Synchronize();
  const KvCacheLayer layer{k.tensor(), v.tensor()};
  table << "\n## Decode attention: fast kernel vs reference split (flash-decoding, partitions of "
        << cuda::kDecodePartitionSize << " keys) and single kernel\n\nOne layer, Hq 16, Hkv 8, hd 128, block size"
        << " 16; KV bytes read / time against the copy bandwidth.\n\n| context | batch | single (ref) | split (ref)"
        << " | fast | fast/split | split KV GB/s (share) | fast KV GB/s (share of copy bw) |\n"
        << "|---|---|---|---|---|---|---|---|\n";
  for (int32_t ctx : z.attention_contexts) {
    for (int32_t batch : z.attention_batches) {
      const StepBatch step = BenchStep(batch, 1, ctx);
      const Tensor q = qkv.tensor().Rows(0, batch), o = out.tensor().Rows(0, batch);
      double seconds[3] = {0, 0, 0};
      for (int which = 0; which < 3; ++which) {
        Backend& b = which == 0 ? *single : which == 1 ? *split : *fast;
        if (absl::Status st = b.BeginStep(step.view(), num_blocks, kBlockSize, max_context); !st.ok()) {
          table << "BeginStep failed: " << st.ToString() << "\n";
          return false;
        }
        seconds[which] = TimeIt([&] { b.Attention(q, shape, layer, 0.088f, o); }, z.warmup,
                                z.smoke ? 1 : ctx * batch > 1 << 20 ? 10 : 50);
      }
      const double bytes = double(batch) * ctx * 2 * shape.num_kv_heads * shape.head_dim * 2;
      if (batch == z.target_attention_batch && ctx >= z.target_min_context) {
        RecordTarget(Target::kDecodeAttention, 100 * bytes / seconds[2] / bw);
      }
      char line[256];
      std::snprintf(line, sizeof line, "| %d | %d | %.1f us | %.1f us | %.1f us | %.2f | %.0f (%.0f%%) | %.0f (%.0f%%) |\n",
                    ctx, batch, seconds[0] * 1e6, seconds[1] * 1e6, seconds[2] * 1e6, seconds[2] / seconds[1],
                    bytes / seconds[1] / 1e9, 100 * bytes / seconds[1] / bw, bytes / seconds[2] / 1e9,
                    100 * bytes / seconds[2] / bw);
      table << line;
    }
  }
  return true;
}

namespace {

// Device memory of the variants' section, freed at the end of it.
struct DeviceBuffers {
  std::vector<void*> all;
  template <typename T>
  T* Zeros(size_t count) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    CUDA_CHECK(cudaMemset(p, 0, count * sizeof(T)));
    all.push_back(p);
    return static_cast<T*>(p);
  }
  ~DeviceBuffers() {
    for (void* p : all) cudaFree(p);
  }
};

}  // namespace

namespace {

// One layer's decode attention over `a` at context `ctx` (positions already
// uploaded): seconds[0] the fast kernel's tensor-core variant, [1] its SIMT
// one (each with PlanDecode's plan for an eager step), [2] the reference
// split kernel. False (the failure written to `table`) when a launch fails.
bool TimeDecodeKernels(const Sizes& z, int sm_count, const cuda::PagedAttentionArgs& a, int group, int32_t ctx,
                       float* ws, size_t ws_floats, uint32_t* arrivals, double (&seconds)[3], std::ostream& table) {
  const int32_t batch = static_cast<int32_t>(a.num_tokens);
  const int iters = z.smoke ? 1 : int64_t{ctx} * batch > 1 << 20 ? 10 : 50;
  for (int which = 0; which < 2; ++which) {
    const cuda::DecodeVariant variant = which == 0 ? cuda::DecodeVariant::kMma : cuda::DecodeVariant::kSimt;
    const cuda::DecodePlan plan = cuda::PlanDecode(
        {batch, a.num_kv_heads, ctx, sm_count, false, cuda::FastDecodeBlocksPerSm(variant, a.head_dim, group)});
    cudaError_t err = cudaSuccess;
    seconds[which] = TimeIt([&] {
      if (err == cudaSuccess) err = cuda::LaunchFastDecodeAttention(variant, a, 0, plan, ws, ws_floats, arrivals, nullptr);
    }, z.warmup, iters);
    if (err != cudaSuccess) {
      table << "LaunchFastDecodeAttention (" << cuda::DecodeVariantName(variant) << ", group " << group
            << ") failed: " << cudaGetErrorString(err) << "\n";
      return false;
    }
  }
  cuda::SplitDecodeArgs split;
  split.max_partitions = (ctx + cuda::kDecodePartitionSize - 1) / cuda::kDecodePartitionSize;
  split.workspace = ws;
  split.workspace_floats = ws_floats;
  cudaError_t err = cudaSuccess;
  seconds[2] = TimeIt([&] {
    if (err == cudaSuccess) err = cuda::LaunchSplitDecodeAttention(a, split, nullptr);
  }, z.warmup, iters);
  if (err != cudaSuccess) {
    table << "LaunchSplitDecodeAttention failed: " << cudaGetErrorString(err) << "\n";
    return false;
  }
  return true;
}

}  // namespace

// Decode attention at GQA groups 4 and 8 (hd 128, blocks of 16, Hkv 2: one
// tp-4 shard of Llama-3-8B (Hq 8) and of Llama-3-70B (Hq 16)): the fast
// kernel's variants (cuda/decode_attention.cuh: the tensor-core one the
// launcher chooses for these groups, and the SIMT one forced), each with the
// plan PlanDecode gives it for an eager step, against the reference set's
// split kernel (flash-decoding over partitions of kDecodePartitionSize keys),
// launched directly on the same arrays, every sequence on its own blocks.
// The cache is zeros: the kernels' work does not depend on the values.
bool AttentionVariantSection(const Sizes& z, double bw, std::ostream& table) {
  constexpr int kHkv = 2, kHd = 128;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int32_t batch = z.variant_batch;
  const int32_t max_context = *std::max_element(z.variant_contexts.begin(), z.variant_contexts.end());
  const int32_t blocks_per_seq = (max_context + kBlockSize - 1) / kBlockSize;
  const int64_t num_blocks = int64_t{batch} * blocks_per_seq;
  const int max_partitions = (max_context + cuda::kDecodePartitionSize - 1) / cuda::kDecodePartitionSize;
  DeviceBuffers mem;
  const size_t cache = static_cast<size_t>(num_blocks * kBlockSize * kHkv * kHd);
  const auto* k = mem.Zeros<__nv_bfloat16>(cache);
  const auto* v = mem.Zeros<__nv_bfloat16>(cache);
  std::vector<int32_t> seqs(static_cast<size_t>(batch)), tables(static_cast<size_t>(num_blocks));
  for (int32_t s = 0; s < batch; ++s) seqs[static_cast<size_t>(s)] = s;
  for (int64_t b = 0; b < num_blocks; ++b) tables[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  int32_t* token_seq = mem.Zeros<int32_t>(seqs.size());
  int32_t* block_tables = mem.Zeros<int32_t>(tables.size());
  int32_t* positions = mem.Zeros<int32_t>(seqs.size());
  CUDA_CHECK(cudaMemcpy(token_seq, seqs.data(), seqs.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(block_tables, tables.data(), tables.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  table << "\n## Decode attention at GQA 4 and 8: tensor-core vs SIMT fast kernel vs reference split\n\nOne layer,"
        << " Hkv " << kHkv << ", hd " << kHd << ", block size " << kBlockSize << ", batch " << batch
        << "; KV bytes read / time against the copy bandwidth; plans from PlanDecode for an eager step.\n\n"
        << "| Hq (group) | context | mma | simt | split (ref) | mma/simt | mma KV GB/s (share of copy bw) |"
        << " simt (share) | split (share) |\n|---|---|---|---|---|---|---|---|---|\n";
  for (int group : {4, 8}) {
    cuda::PagedAttentionArgs a;
    a.num_heads = group * kHkv;
    a.num_kv_heads = kHkv;
    a.head_dim = kHd;
    a.num_tokens = batch;
    a.token_seq = token_seq;
    a.positions = positions;
    a.block_tables = block_tables;
    a.max_blocks_per_seq = blocks_per_seq;
    a.block_size = kBlockSize;
    a.scale = 0.088f;
    a.k_cache = k;
    a.v_cache = v;
    a.qkv = mem.Zeros<__nv_bfloat16>(static_cast<size_t>(batch) * (a.num_heads + 2 * kHkv) * kHd);
    a.out = mem.Zeros<__nv_bfloat16>(static_cast<size_t>(batch) * a.num_heads * kHd);
    const size_t ws_floats = cuda::SplitDecodeWorkspaceFloats(batch, a.num_heads, kHd,
                                                              std::max(max_partitions, cuda::DecodeSplitCap(max_context)));
    float* ws = mem.Zeros<float>(ws_floats);
    uint32_t* arrivals = mem.Zeros<uint32_t>(static_cast<size_t>(batch) * kHkv);  // zero between launches
    for (int32_t ctx : z.variant_contexts) {
      const std::vector<int32_t> pos(static_cast<size_t>(batch), ctx - 1);
      CUDA_CHECK(cudaMemcpy(positions, pos.data(), pos.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      double seconds[3] = {0, 0, 0};
      if (!TimeDecodeKernels(z, prop.multiProcessorCount, a, group, ctx, ws, ws_floats, arrivals, seconds, table)) {
        return false;
      }
      const double bytes = double(batch) * ctx * 2 * kHkv * kHd * 2;
      char line[320];
      std::snprintf(line, sizeof line,
                    "| %d (%d) | %d | %.1f us | %.1f us | %.1f us | %.2f | %.0f (%.0f%%) | %.0f%% | %.0f%% |\n",
                    a.num_heads, group, ctx, seconds[0] * 1e6, seconds[1] * 1e6, seconds[2] * 1e6,
                    seconds[0] / seconds[1], bytes / seconds[0] / 1e9, 100 * bytes / seconds[0] / bw,
                    100 * bytes / seconds[1] / bw, 100 * bytes / seconds[2] / bw);
      table << line;
    }
  }
  return true;
}

namespace {

// The MLP's first half at small M on the fast set: LinearSiluMul (one GEMV
// launch writing silu(gate) * up) against Linear into gate_up then SiluMul
// (two launches and the [M, 2F] round trip), weights cycled as in GemvSection.
bool MlpSection(const Sizes& z, Backend& fast, std::ostream& table) {
  table << "\n## MLP gate/up + SiLU at small batch: fused GEMV vs GEMV + SiluMul (fast set)\n\n"
        << "| model | K -> 2 x F | M | fused | GEMV + SiluMul | fused / two ops |\n|---|---|---|---|---|---|\n";
  const int64_t max_rows = *std::max_element(z.gemv_rows.begin(), z.gemv_rows.end());
  for (const Sizes::Mlp& p : z.mlp_shapes) {
    const double bytes = double(2 * p.F) * p.K * 2;
    const size_t copies = std::max<size_t>(2, (z.gemv_rotate_bytes + size_t(bytes) - 1) / size_t(bytes));
    std::vector<Buffer> weights;
    for (size_t c = 0; c < copies; ++c) weights.push_back(fast.Allocate(DType::kBF16, {2 * p.F, p.K}));
    Buffer x = fast.Allocate(DType::kBF16, {max_rows, p.K}), gate_up = fast.Allocate(DType::kBF16, {max_rows, 2 * p.F}),
           act = fast.Allocate(DType::kBF16, {max_rows, p.F});
    fast.Synchronize();
    for (int64_t m : z.gemv_rows) {
      const Tensor xm = x.tensor().Rows(0, m), gm = gate_up.tensor().Rows(0, m), am = act.tensor().Rows(0, m);
      size_t next = 0;
      const double fused =
          TimeIt([&] { fast.LinearSiluMul(xm, weights[next++ % copies], gm, am); }, z.warmup, z.gemv_iters);
      const double two = TimeIt(
          [&] {
            fast.Linear(xm, weights[next++ % copies], nullptr, gm);
            fast.SiluMul(gm, am);
          },
          z.warmup, z.gemv_iters);
      char line[256];
      std::snprintf(line, sizeof line, "| %s | %lld -> 2 x %lld | %lld | %.2f us | %.2f us | %.2f |\n", p.name,
                    static_cast<long long>(p.K), static_cast<long long>(p.F), static_cast<long long>(m), fused * 1e6,
                    two * 1e6, fused / two);
      table << line;
    }
  }
  return true;
}

}  // namespace

// Linear at small M through the fast kernel set (the GEMV) and the reference
// set (cuBLAS) on the same buffers. Each timed call reads a different copy of
// the weights (gemv_rotate_bytes of them, zeros: the work does not depend on
// the values), so the weights come from HBM, not the L2, as in a decode step.
bool GemvSection(const Sizes& z, double bw, std::ostream& table) {
  std::unique_ptr<Backend> fast = MakeCudaBackend(0, cuda::KernelSet::kFast);
  std::unique_ptr<Backend> ref = MakeCudaBackend(0, cuda::KernelSet::kReference);
  table << "\n## Linear at small batch: GEMV (fast set) vs cuBLAS (reference set)\n\nWeight bytes read / time"
        << " against the copy bandwidth; " << z.gemv_iters << " calls per number, weights cycled through "
        << (z.gemv_rotate_bytes >> 20) << " MiB.\n\n| projection | K -> N | M | GEMV | cuBLAS | GEMV GB/s (share)"
        << " | cuBLAS GB/s (share) |\n|---|---|---|---|---|---|---|\n";
  const int64_t max_rows = *std::max_element(z.gemv_rows.begin(), z.gemv_rows.end());
  for (const Sizes::Projection& p : z.gemv_shapes) {
    const double bytes = double(p.N) * p.K * 2;
    const size_t copies = std::max<size_t>(2, (z.gemv_rotate_bytes + size_t(bytes) - 1) / size_t(bytes));
    std::vector<Buffer> weights;
    for (size_t c = 0; c < copies; ++c) weights.push_back(fast->Allocate(DType::kBF16, {p.N, p.K}));
    Buffer x = fast->Allocate(DType::kBF16, {max_rows, p.K}), y = fast->Allocate(DType::kBF16, {max_rows, p.N});
    fast->Synchronize();
    for (int64_t m : z.gemv_rows) {
      const Tensor xm = x.tensor().Rows(0, m), ym = y.tensor().Rows(0, m);
      double seconds[2] = {0, 0};
      for (int which = 0; which < 2; ++which) {
        Backend& b = which == 0 ? *fast : *ref;
        size_t next = 0;
        seconds[which] = TimeIt([&] { b.Linear(xm, weights[next++ % copies], nullptr, ym); }, z.warmup, z.gemv_iters);
      }
      char line[256];
      std::snprintf(line, sizeof line, "| %s | %lld -> %lld | %lld | %.2f us | %.2f us | %.0f (%.0f%%) | %.0f (%.0f%%) |\n",
                    p.name, static_cast<long long>(p.K), static_cast<long long>(p.N), static_cast<long long>(m),
                    seconds[0] * 1e6, seconds[1] * 1e6, bytes / seconds[0] / 1e9, 100 * bytes / seconds[0] / bw,
                    bytes / seconds[1] / 1e9, 100 * bytes / seconds[1] / bw);
      table << line;
    }
  }
  return MlpSection(z, *fast, table);
}

namespace {

// One decoder layer's weights for FusionSection (zeros: the work does not depend on the values).
struct LayerWeights {
  Buffer input_norm, qkv, o, post_norm, gate_up, down;
};

// Seconds per run of `ops` (enqueues a layer's ops on `b` for weight set i),
// cycling through `sets` sets of weights: [0] eagerly, [1] as one CUDA graph
// per set, replayed in turn (the served decode path).
bool TimeLayerOps(const Sizes& z, Backend& b, size_t sets, const std::function<void(size_t)>& ops, double (&s)[2],
                  std::ostream& table) {
  size_t next = 0;
  s[0] = TimeIt([&] { ops(next++ % sets); }, z.warmup, z.gemv_iters);
  std::vector<std::unique_ptr<BackendGraph>> graphs;
  for (size_t i = 0; i < sets; ++i) {
    if (absl::Status st = b.BeginCapture(); !st.ok()) {
      table << "fusion: BeginCapture: " << st.ToString() << "\n";
      return false;
    }
    ops(i);
    absl::StatusOr<std::unique_ptr<BackendGraph>> g = b.EndCapture();
    if (!g.ok()) {
      table << "fusion: EndCapture: " << g.status().ToString() << "\n";
      return false;
    }
    graphs.push_back(*std::move(g));
  }
  s[1] = TimeIt([&] { graphs[next++ % sets]->Replay(); }, z.warmup, z.gemv_iters);
  return true;
}

}  // namespace

// A decoder layer's fused ops (Backend::FusesLayerOps, cuda/gemv.cuh) at M =
// z.gemv_rows tokens on Qwen3-0.6B's layer (D 1024, Hq 16, Hkv 8, hd 128, F
// 3072; q/k norms), each pair of fused ops against the unfused fast ops it
// replaces, eagerly and as a graph (PDL edges between the launches):
//   down + add + input norm + QKV + q/k norm + RoPE + KV store: 2 launches vs 4;
//   o_proj + add + post norm + gate/up + SiLU:                 2 launches vs 3.
// Weights cycled through gemv_rotate_bytes, as in GemvSection.
bool FusionSection(const Sizes& z, std::ostream& table) {
  const bool tiny = z.smoke;
  const int64_t D = tiny ? 64 : 1024, hq = tiny ? 4 : 16, hkv = tiny ? 2 : 8, hd = tiny ? 32 : 128,
                F = tiny ? 96 : 3072, context = tiny ? 20 : 512;
  const AttentionShape shape{static_cast<int32_t>(hq), static_cast<int32_t>(hkv), static_cast<int32_t>(hd)};
  const int64_t nqkv = shape.qkv_width(), max_rows = *std::max_element(z.gemv_rows.begin(), z.gemv_rows.end());
  std::unique_ptr<Backend> fast = MakeCudaBackend(0, cuda::KernelSet::kFast);
  StepCapacity capacity;
  capacity.max_tokens = max_rows, capacity.max_seqs = max_rows, capacity.max_context = 2 * context;
  capacity.block_size = kBlockSize, capacity.max_query_heads = shape.num_heads, capacity.max_head_dim = shape.head_dim;
  if (absl::Status st = fast->Reserve(capacity); !st.ok()) {
    table << "\nfusion: Reserve: " << st.ToString() << "\n";
    return false;
  }
  const double layer_bytes = 2.0 * (nqkv * D + D * hq * hd + 2 * F * D + D * F);
  const size_t sets = std::max<size_t>(2, static_cast<size_t>((z.gemv_rotate_bytes + layer_bytes - 1) / layer_bytes));
  std::vector<LayerWeights> w(sets);
  for (LayerWeights& l : w) {
    l.input_norm = fast->Allocate(DType::kBF16, {D});
    l.qkv = fast->Allocate(DType::kBF16, {nqkv, D});
    l.o = fast->Allocate(DType::kBF16, {D, hq * hd});
    l.post_norm = fast->Allocate(DType::kBF16, {D});
    l.gate_up = fast->Allocate(DType::kBF16, {2 * F, D});
    l.down = fast->Allocate(DType::kBF16, {D, F});
  }
  const int64_t blocks = max_rows * ((2 * context + kBlockSize - 1) / kBlockSize);
  Buffer k = fast->Allocate(DType::kBF16, {blocks, kBlockSize, hkv, hd});
  Buffer v = fast->Allocate(DType::kBF16, {blocks, kBlockSize, hkv, hd});
  Buffer rope = fast->Allocate(DType::kF32, {2 * context, hd}), q_norm = fast->Allocate(DType::kBF16, {hd}),
         k_norm = fast->Allocate(DType::kBF16, {hd});
  Buffer residual = fast->Allocate(DType::kBF16, {max_rows, D}), x = fast->Allocate(DType::kBF16, {max_rows, D}),
         qkv = fast->Allocate(DType::kBF16, {max_rows, nqkv}), attn = fast->Allocate(DType::kBF16, {max_rows, hq * hd}),
         gate_up = fast->Allocate(DType::kBF16, {max_rows, 2 * F}), act = fast->Allocate(DType::kBF16, {max_rows, F});
  fast->Synchronize();
  const KvCacheLayer cache{k.tensor(), v.tensor()};
  table << "\n## A decoder layer in fewer launches: fused ops vs the unfused fast ops\n\nQwen3-0.6B's layer"
        << (tiny ? " (tiny under --smoke)" : "") << ", fast set after Reserve, " << z.gemv_iters
        << " runs per number, weights cycled through " << (z.gemv_rotate_bytes >> 20)
        << " MiB; eager, and replayed as one CUDA graph per weight set.\n\n| ops | M | fused eager | unfused eager |"
        << " fused graph | unfused graph | graph fused / unfused |\n|---|---|---|---|---|---|---|\n";
  for (int64_t m : z.gemv_rows) {
    const StepBatch step = BenchStep(static_cast<int32_t>(m), 1, static_cast<int32_t>(context));
    if (absl::Status st = fast->BeginStep(step.view(), blocks, kBlockSize, 2 * context); !st.ok()) {
      table << "fusion: BeginStep: " << st.ToString() << "\n";
      return false;
    }
    const Tensor r = residual.tensor().Rows(0, m), xm = x.tensor().Rows(0, m), q = qkv.tensor().Rows(0, m),
                 at = attn.tensor().Rows(0, m), gu = gate_up.tensor().Rows(0, m), a = act.tensor().Rows(0, m);
    struct Pair {
      const char* name;
      std::function<void(size_t)> fused, unfused;
    };
    const Pair pairs[] = {
        {"down + add + input norm + QKV + q/k norm + RoPE + KV store (2 vs 4 launches)",
         [&](size_t i) {
           fast->LinearAddResidual(a, w[i].down, nullptr, xm, r);
           fast->RmsNormQkvRopeStoreKv(r, w[i].input_norm, 1e-6f, xm, w[i].qkv, nullptr, q, shape, &q_norm.tensor(),
                                       &k_norm.tensor(), rope, cache);
         },
         [&](size_t i) {
           fast->Linear(a, w[i].down, nullptr, xm);
           fast->AddRmsNorm(xm, r, w[i].input_norm, 1e-6f);
           fast->Linear(xm, w[i].qkv, nullptr, q);
           fast->QkNormRopeStoreKv(q, shape, &q_norm.tensor(), &k_norm.tensor(), 1e-6f, rope, cache);
         }},
        {"o_proj + add + post norm + gate/up + SiLU (2 vs 3 launches)",
         [&](size_t i) {
           fast->LinearAddResidual(at, w[i].o, nullptr, xm, r);
           fast->RmsNormLinearSiluMul(r, w[i].post_norm, 1e-6f, xm, w[i].gate_up, gu, a);
         },
         [&](size_t i) {
           fast->Linear(at, w[i].o, nullptr, xm);
           fast->AddRmsNorm(xm, r, w[i].post_norm, 1e-6f);
           fast->LinearSiluMul(xm, w[i].gate_up, gu, a);
         }},
    };
    for (const Pair& p : pairs) {
      double fused[2], unfused[2];
      if (!TimeLayerOps(z, *fast, sets, p.fused, fused, table) || !TimeLayerOps(z, *fast, sets, p.unfused, unfused, table)) {
        return false;
      }
      char line[320];
      std::snprintf(line, sizeof line, "| %s | %lld | %.2f us | %.2f us | %.2f us | %.2f us | %.2f |\n", p.name,
                    static_cast<long long>(m), fused[0] * 1e6, unfused[0] * 1e6, fused[1] * 1e6, unfused[1] * 1e6,
                    fused[1] / unfused[1]);
      table << line;
    }
  }
  return true;
}

namespace {

// A device array of `count` T copied from host, freed by the caller with cudaFree.
template <typename T>
T* DeviceArray(const std::vector<T>& host) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(sizeof(T) * host.size(), 1)));
  if (!host.empty()) CUDA_CHECK(cudaMemcpy(p, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

}  // namespace

namespace {

// Seconds per replay of `enqueue`'s launches captured into a CUDA graph on `stream`.
template <typename Fn>
double TimeGraph(cudaStream_t stream, Fn&& enqueue, int iters) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double s = TimeIt([&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, 3, iters);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return s;
}

// CudaSampler::Sample's whole call over logits [1, B, V] on `stream`
// (temperature 0.6 + top-p 0.9, seeded rows): sample[0] on the fast set,
// [1] the fast set through its decode-batch graph (*graphed: whether the
// graph ran, i.e. B is within SlicedRowsCap), [2] the reference set. False
// (written to `table`) when a sampler cannot be created.
bool TimeSampleCalls(const Sizes& z, cudaStream_t stream, uint16_t* d_logits, int32_t B, int32_t V,
                     double (&sample)[3], bool* graphed, std::ostream& table) {
  for (int which = 0; which < 3; ++which) {
    cuda::CudaSampler::Options options;
    options.max_seqs = B, options.vocab_size = V;
    options.kernels = which < 2 ? cuda::KernelSet::kFast : cuda::KernelSet::kReference;
    auto sampler = cuda::CudaSampler::Create(options, stream);
    if (!sampler.ok()) {
      table << "| " << B << " | CudaSampler::Create failed: " << sampler.status().ToString() << " |\n";
      return false;
    }
    std::vector<std::unique_ptr<SequenceSamplingState>> seqs;
    std::vector<SequenceSamplingState*> ptrs;
    for (int32_t r = 0; r < B; ++r) {
      SamplingParams p;
      p.temperature = 0.6f, p.top_p = 0.9f, p.seed = static_cast<uint64_t>(r);
      seqs.push_back(std::make_unique<SequenceSamplingState>(p, std::vector<int32_t>{1}, std::vector<int32_t>{}));
      ptrs.push_back(seqs.back().get());
    }
    const Tensor gathered(d_logits, DType::kBF16, Device::kCuda, {1, B, V});
    if (which == 1 && !(*sampler)->PrepareBatch(gathered, V).ok()) continue;
    sample[which] = TimeIt([&] { (*sampler)->Sample(gathered, V, ptrs); }, z.smoke ? 0 : 3, z.sampler_iters);
    if (which == 1) *graphed = (*sampler)->graph_calls() > 0;
  }
  return true;
}

}  // namespace

// The sampler's kernels alone on random bf16 logits [1, B, V] (temperature
// 0.6, top-p 0.9, no penalties or log-probs): the sliced path (as CudaSampler
// plans it on this device) and the row kernel, eager and as a graph
// (captured by the emulator too under --smoke); then CudaSampler::Sample
// under each kernel set, the whole call, and under the fast set with the
// decode-batch graph of the batch (PrepareBatch: the upload, the stages and
// the read-back replayed as one graph, one sync).
bool SamplerSection(const Sizes& z, std::ostream& table) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int32_t V = z.sampler_vocab;
  table << "\n## GPU sampler: sliced (fast set) vs one block per row (reference set)\n\nV = " << V
        << ", bf16 logits, temperature 0.6 + top-p 0.9, " << z.sampler_iters << " calls per number; kernels"
        << " launched eagerly and replayed as one CUDA graph; Sample = CudaSampler::Sample's whole call (upload,"
        << " kernels, read-back, sync; 'graph': through its decode-batch graph, as a served decode step);"
        << " launches: the sliced path's kernels per call (the row kernel is 1)."
        << "\n\n| batch | slices | launches | sliced eager | sliced graph | row eager | row graph |"
        << " Sample fast | Sample fast graph | Sample reference |\n|---|---|---|---|---|---|---|---|---|---|\n";
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int32_t B : z.sampler_batches) {
    std::vector<uint16_t> logits(static_cast<size_t>(B) * V);
    for (uint16_t& x : logits) x = FloatToBf16(normal(rng));
    std::vector<sampling::RowParams> params(B);
    std::vector<int32_t> index(B), offsets(B + 1, 0);
    for (int32_t r = 0; r < B; ++r) {
      params[r].temperature = 0.6f, params[r].top_p = 0.9f, params[r].uniform = (r + 0.5) / B;
      index[r] = r;
    }
    uint16_t* d_logits = DeviceArray(logits);
    sampling::RowParams* d_params = DeviceArray(params);
    int32_t* d_index = DeviceArray(index);
    int32_t* d_offsets = DeviceArray(offsets);
    sampling::RowResult* d_results = DeviceArray(std::vector<sampling::RowResult>(B));
    sampling::TopLogprob* d_top = DeviceArray(std::vector<sampling::TopLogprob>(B));
    cuda::SlicedSampleArgs sliced;
    sliced.gathered = d_logits, sliced.rows = B, sliced.layout_rows = B, sliced.row_index = d_index;
    sliced.shard_vocab = V, sliced.vocab = V, sliced.params = d_params, sliced.results = d_results;
    sliced.plan = cuda::PlanSlices(B, V, prop.multiProcessorCount);
    sliced.stages = cuda::PlanSliceStages(params.data(), B, V);
    sliced.workspace_bytes = cuda::SlicedSampleWorkspaceBytes(B, sliced.plan.slices);
    CUDA_CHECK(cudaMalloc(&sliced.workspace, sliced.workspace_bytes));
    CUDA_CHECK(cudaMemsetAsync(sliced.workspace, 0, cuda::SlicedSampleCounterBytes(B), stream));  // arrival counters
    cuda::SampleRowsArgs row;
    row.gathered = d_logits, row.rows = B, row.layout_rows = B, row.row_index = d_index, row.shard_vocab = V;
    row.vocab = V, row.params = d_params, row.entry_offsets = d_offsets, row.top_stride = 1, row.top = d_top;
    row.results = d_results;
    const auto run_sliced = [&] { CUDA_CHECK(cuda::LaunchSlicedSample(sliced, stream)); };
    const auto run_row = [&] { CUDA_CHECK(cuda::LaunchSampleRows(row, stream)); };
    const auto eager = [&](auto&& fn) {
      return TimeIt([&] { fn(); CUDA_CHECK(cudaStreamSynchronize(stream)); }, z.smoke ? 0 : 3, z.sampler_iters);
    };
    const double sliced_eager = eager(run_sliced), row_eager = eager(run_row);
    const double sliced_graph = TimeGraph(stream, run_sliced, z.sampler_iters);
    // Issue 12's sampler target: the sliced kernels of a batch-1 call replayed as a graph
    // (CudaSampler's whole call, upload and sync included, is the "Sample fast graph" column).
    if (B == 1) RecordTarget(Target::kSampler, sliced_graph * 1e6);
    const double row_graph = TimeGraph(stream, run_row, z.sampler_iters);
    double sample[3] = {0, 0, 0};  // fast, fast through its graph, reference
    bool graphed = false;          // whether the graph ran (the batch is within SlicedRowsCap)
    if (!TimeSampleCalls(z, stream, d_logits, B, V, sample, &graphed, table)) return false;
    const auto us = [](double s) { return s * 1e6; };
    char line[320];
    std::snprintf(line, sizeof line,
                  "| %d | %d | %d | %.1f us | %.1f us | %.1f us | %.1f us | %.1f us | %s | %.1f us |\n", B,
                  sliced.plan.slices, sliced.stages.count, us(sliced_eager), us(sliced_graph), us(row_eager),
                  us(row_graph), us(sample[0]),
                  graphed ? absl::StrCat(absl::SixDigits(us(sample[1])), " us").c_str() : "-", us(sample[2]));
    table << line;
    for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_params), static_cast<void*>(d_index),
                    static_cast<void*>(d_offsets), static_cast<void*>(d_results), static_cast<void*>(d_top),
                    sliced.workspace}) {
      CUDA_CHECK(cudaFree(p));
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return true;
}

// A mixed step: one prompt of `prompt` tokens from position 0 (blocks 0, 1,
// ...), then `decodes` decode sequences of context `context` on the blocks
// after it.
StepBatch MixedBenchStep(int32_t prompt, int32_t decodes, int32_t context) {
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(decodes) + 1), tables(ids.size());
  std::vector<StepSequence> seqs;
  int32_t next_block = 0;
  for (size_t s = 0; s < ids.size(); ++s) {
    const int32_t len = s == 0 ? prompt : context, n = s == 0 ? prompt : 1;
    for (int32_t pos = len - n; pos < len; ++pos) ids[s].push_back((static_cast<int32_t>(s) * 7919 + pos * 31) % 30000);
    for (int32_t b = 0; b < (len + kBlockSize - 1) / kBlockSize; ++b) tables[s].push_back(next_block++);
    seqs.push_back({ids[s], len - n, tables[s]});
  }
  absl::StatusOr<StepBatch> step = StepBatch::Build(seqs, kBlockSize);
  TPSERVE_CHECK(step.ok(), "MixedBenchStep: ", step.status().message());
  return *std::move(step);
}

// Prefill attention of one layer with Qwen3-0.6B's geometry (Hq 16, Hkv 8, hd
// 128, blocks of 16): one prompt of P tokens from position 0, the fast kernel
// set (the tensor-core prefill kernel, cuda/prefill_attention.cuh) against the
// reference set (one block per token and KV head). TFLOP/s counts the causal
// work: Q·Kᵀ and P·V over P·(P+1)/2 (query, key) pairs, 4 · Hq · hd FLOPs each.
// Then the same prompts in mixed steps, beside Sizes::mixed_decodes decodes
// of Sizes::mixed_decode_context keys (both sets after Reserve, as served):
// the fast set's prompt rows go through the tensor-core kernel and its
// decode rows through the fast decode kernel in the same Attention call; the
// reference set runs its prefill kernel and its split decode kernel.
// The cache is zeros: the kernels' work does not depend on the values.
bool PrefillAttentionSection(const Sizes& z, std::ostream& table) {
  const AttentionShape shape{16, 8, 128};
  const int32_t max_prompt =
      *std::max_element(z.prefill_attention_prompts.begin(), z.prefill_attention_prompts.end());
  const int32_t decodes = z.mixed_decodes, decode_ctx = z.mixed_decode_context;
  const int64_t max_tokens = max_prompt + decodes;
  std::unique_ptr<Backend> reference = MakeCudaBackend(0, cuda::KernelSet::kReference),
                           fast = MakeCudaBackend(0, cuda::KernelSet::kFast);
  StepCapacity capacity;
  capacity.max_tokens = max_tokens;
  capacity.max_seqs = decodes + 1;
  capacity.max_context = std::max(max_prompt, decode_ctx);
  capacity.block_size = kBlockSize;
  capacity.max_query_heads = shape.num_heads;
  capacity.max_head_dim = shape.head_dim;
  for (Backend* b : {reference.get(), fast.get()}) {
    if (absl::Status st = b->Reserve(capacity); !st.ok()) {
      table << "\nprefill attention: Reserve failed on " << b->name() << ": " << st.ToString() << "\n";
      return false;
    }
  }
  const int64_t num_blocks =
      (max_prompt + kBlockSize - 1) / kBlockSize + int64_t{decodes} * ((decode_ctx + kBlockSize - 1) / kBlockSize);
  Buffer k = fast->Allocate(DType::kBF16, {num_blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer v = fast->Allocate(DType::kBF16, {num_blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer qkv = fast->Allocate(DType::kBF16, {max_tokens, shape.qkv_width()});
  Buffer out = fast->Allocate(DType::kBF16, {max_tokens, int64_t{shape.num_heads} * shape.head_dim});
  fast->Synchronize();
  const KvCacheLayer layer{k.tensor(), v.tensor()};
  // Seconds per Attention call of `step` on the reference set [0] and the fast set [1].
  const auto time_both = [&](const StepBatch& step, int32_t max_position, double (&seconds)[2]) {
    const int64_t T = step.view().num_tokens();
    const Tensor q = qkv.tensor().Rows(0, T), o = out.tensor().Rows(0, T);
    for (int which = 0; which < 2; ++which) {
      Backend& b = which == 0 ? *reference : *fast;
      if (absl::Status st = b.BeginStep(step.view(), num_blocks, kBlockSize, max_position); !st.ok()) {
        table << "BeginStep failed: " << st.ToString() << "\n";
        return false;
      }
      seconds[which] = TimeIt([&] { b.Attention(q, shape, layer, 0.088f, o); }, z.warmup, z.smoke ? 1 : 20);
    }
    return true;
  };
  table << "\n## Prefill attention: tensor-core kernel (fast set) vs reference kernel\n\nOne layer, one prompt, Hq 16,"
        << " Hkv 8, hd 128, block size 16; causal FLOPs (4 · Hq · hd per visible query-key pair) / time.\n\n"
        << "| prompt | reference | tensor-core | speed-up | reference TFLOP/s | tensor-core TFLOP/s |\n"
        << "|---|---|---|---|---|---|\n";
  for (int32_t prompt : z.prefill_attention_prompts) {
    double seconds[2] = {0, 0};
    if (!time_both(BenchStep(1, prompt, prompt), max_prompt, seconds)) return false;
    const double flops = 4.0 * shape.num_heads * shape.head_dim * (double(prompt) * (prompt + 1) / 2);
    char line[256];
    std::snprintf(line, sizeof line, "| %d | %.3f ms | %.3f ms | %.2f | %.1f | %.1f |\n", prompt, seconds[0] * 1e3,
                  seconds[1] * 1e3, seconds[0] / seconds[1], flops / seconds[0] / 1e12, flops / seconds[1] / 1e12);
    table << line;
  }
  table << "\n## Mixed steps: one prompt beside " << decodes << " decodes of " << decode_ctx << " keys\n\n"
        << "One Attention call per step, both sets after Reserve: the fast set's prompt rows through the tensor-core"
        << " prefill kernel and its decode rows through the fast decode kernel; the reference set's through its"
        << " prefill and split decode kernels.\n\n| prompt | decodes x context | reference | fast | speed-up |\n"
        << "|---|---|---|---|---|\n";
  for (int32_t prompt : z.prefill_attention_prompts) {
    double seconds[2] = {0, 0};
    if (!time_both(MixedBenchStep(prompt, decodes, decode_ctx), std::max(max_prompt, decode_ctx), seconds)) {
      return false;
    }
    char line[256];
    std::snprintf(line, sizeof line, "| %d | %d x %d | %.3f ms | %.3f ms | %.2f |\n", prompt, decodes, decode_ctx,
                  seconds[0] * 1e3, seconds[1] * 1e3, seconds[0] / seconds[1]);
    table << line;
  }
  return true;
}

}  // namespace tpserve::gpu_bench
