// gpu_bench's `deterministic` section: the kernels of the CUDA backend's
// deterministic mode (cuda/cuda_backend.h) beside the fast set's kernels they
// replace, on Qwen3-0.6B's shapes, through the backends' ops:
//   * Linear at M = 1, 8, 64, 256: the batch-invariant tensor-core GEMM
//     (cuda/det_gemm.cuh) against the fast set's GEMV (M <= 8) or cuBLAS;
//   * decode attention at batch 64 (and 1), contexts 1024 and 4096: the
//     deterministic kernel (cuda/det_attention.cuh, 512-key partitions split
//     over blocks and merged in order) against the fast decode kernel, both
//     after Reserve;
//   * prefill attention of one 2048-token prompt: the deterministic kernel
//     (16-row tiles) against the fast set's 64-row tensor-core kernel.
// The served decode rows of deterministic mode (the whole step, its sampler
// included) are in the models section (gpu_bench.cc, ServedDecodeRows).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpu/bench_util.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_set.h"

namespace tpserve::gpu_bench {
namespace {

std::unique_ptr<Backend> Deterministic() {
  CudaBackendOptions options;
  options.deterministic = true;
  return MakeCudaBackend(0, options);
}

// Linear as in GemvSection (weights cycled past the L2, zeros), at decode and
// prefill row counts.
void LinearRows(const Sizes& z, double bw, Backend& det, Backend& fast, std::ostream& table) {
  table << "\n## Deterministic mode: Linear, batch-invariant GEMM vs the fast set (GEMV at M <= 8, else cuBLAS)\n\n"
        << "Weight bytes read / time against the copy bandwidth; weights cycled through "
        << (z.gemv_rotate_bytes >> 20) << " MiB.\n\n| projection | K -> N | M | deterministic | fast | det / fast |"
        << " det GB/s (share) |\n|---|---|---|---|---|---|---|\n";
  const int64_t max_rows = *std::max_element(z.det_rows.begin(), z.det_rows.end());
  for (const Sizes::Projection& p : z.gemv_shapes) {
    const double bytes = double(p.N) * p.K * 2;
    const size_t copies = std::max<size_t>(2, (z.gemv_rotate_bytes + size_t(bytes) - 1) / size_t(bytes));
    std::vector<Buffer> weights;
    for (size_t c = 0; c < copies; ++c) weights.push_back(det.Allocate(DType::kBF16, {p.N, p.K}));
    Buffer x = det.Allocate(DType::kBF16, {max_rows, p.K}), y = det.Allocate(DType::kBF16, {max_rows, p.N});
    det.Synchronize();
    for (int64_t m : z.det_rows) {
      const Tensor xm = x.tensor().Rows(0, m), ym = y.tensor().Rows(0, m);
      double seconds[2] = {0, 0};
      for (int which = 0; which < 2; ++which) {
        Backend& b = which == 0 ? det : fast;
        size_t next = 0;
        seconds[which] = TimeIt([&] { b.Linear(xm, weights[next++ % copies], nullptr, ym); }, z.warmup, z.gemv_iters);
      }
      char line[256];
      std::snprintf(line, sizeof line, "| %s | %lld -> %lld | %lld | %.2f us | %.2f us | %.2f | %.0f (%.0f%%) |\n",
                    p.name, static_cast<long long>(p.K), static_cast<long long>(p.N), static_cast<long long>(m),
                    seconds[0] * 1e6, seconds[1] * 1e6, seconds[0] / seconds[1], bytes / seconds[0] / 1e9,
                    100 * bytes / seconds[0] / bw);
      table << line;
    }
  }
}

// One layer's attention through each backend's Attention op over a zero cache
// (the work does not depend on the values), every sequence on its own blocks.
double TimeAttention(const Sizes& z, Backend& b, const AttentionShape& shape, const StepBatch& step, int64_t blocks) {
  if (!b.BeginStep(step.view(), blocks, kBlockSize, 1 << 20).ok()) return NAN;
  const int64_t T = step.view().num_tokens();
  Buffer k = b.Allocate(DType::kBF16, {blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer v = b.Allocate(DType::kBF16, {blocks, kBlockSize, shape.num_kv_heads, shape.head_dim});
  Buffer qkv = b.Allocate(DType::kBF16, {T, shape.qkv_width()});
  Buffer out = b.Allocate(DType::kBF16, {T, int64_t{shape.num_heads} * shape.head_dim});
  const KvCacheLayer cache{k.tensor(), v.tensor()};
  return TimeIt([&] { b.Attention(qkv, shape, cache, 0.088f, out.tensor()); }, z.warmup, z.iters);
}

void AttentionRows(const Sizes& z, double bw, Backend& det, Backend& fast, std::ostream& table) {
  const AttentionShape shape{16, 8, 128};
  StepCapacity capacity;
  capacity.max_tokens = std::max(z.det_prefill, z.det_attention_batch);
  capacity.max_seqs = std::max(z.det_attention_batch, 1);
  capacity.max_context = std::max(*std::max_element(z.det_contexts.begin(), z.det_contexts.end()), z.det_prefill);
  capacity.block_size = kBlockSize;
  capacity.max_query_heads = shape.num_heads;
  capacity.max_head_dim = shape.head_dim;
  for (Backend* b : {&det, &fast}) {
    if (absl::Status st = b->Reserve(capacity); !st.ok()) {
      table << "\nattention: Reserve failed: " << st.ToString() << "\n";
      return;
    }
  }
  table << "\n## Deterministic mode: attention (Qwen3-0.6B geometry, one layer, after Reserve)\n\n"
        << "| case | deterministic | fast | det / fast | det KV GB/s (share of copy bw) |\n|---|---|---|---|---|\n";
  for (int batch : {1, z.det_attention_batch}) {
    for (int32_t ctx : z.det_contexts) {
      const StepBatch step = BenchStep(batch, 1, ctx);
      const int64_t blocks = int64_t{batch} * ((ctx + kBlockSize - 1) / kBlockSize);
      const double d = TimeAttention(z, det, shape, step, blocks), f = TimeAttention(z, fast, shape, step, blocks);
      const double bytes = double(batch) * ctx * 2 * shape.num_kv_heads * shape.head_dim * 2;
      char line[256];
      std::snprintf(line, sizeof line, "| decode batch %d, ctx %d | %.1f us | %.1f us | %.2f | %.0f (%.0f%%) |\n",
                    batch, ctx, d * 1e6, f * 1e6, d / f, bytes / d / 1e9, 100 * bytes / d / bw);
      table << line;
    }
  }
  const StepBatch prompt = BenchStep(1, z.det_prefill, z.det_prefill);
  const int64_t blocks = (z.det_prefill + kBlockSize - 1) / kBlockSize;
  const double d = TimeAttention(z, det, shape, prompt, blocks), f = TimeAttention(z, fast, shape, prompt, blocks);
  char line[256];
  std::snprintf(line, sizeof line, "| prefill of one %d-token prompt | %.1f us | %.1f us | %.2f | |\n", z.det_prefill,
                d * 1e6, f * 1e6, d / f);
  table << line;
}

}  // namespace

bool DeterministicSection(const Sizes& z, double bw, std::ostream& table) {
  std::unique_ptr<Backend> det = Deterministic(), fast = MakeCudaBackend(0, cuda::KernelSet::kFast);
  LinearRows(z, bw, *det, *fast, table);
  AttentionRows(z, bw, *det, *fast, table);
  return true;
}

}  // namespace tpserve::gpu_bench
