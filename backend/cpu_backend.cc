#include "backend/cpu_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "backend/cpu_attention.h"
#include "backend/cpu_gemm.h"
#include "backend/cpu_ops.h"
#include "backend/step_validation.h"

namespace tpserve {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; also what AVX-512 loads like

// Shape mismatches are programming errors (backend.h): abort with the op and the shapes.
[[noreturn]] void Die(const char* op, const std::string& what) {
  std::fprintf(stderr, "CpuBackend::%s: %s\n", op, what.c_str());
  std::abort();
}

void Expect(bool ok, const char* op, auto&&... what) {
  if (!ok) Die(op, absl::StrCat(what...));
}

// A float32 tensor on the CPU with data.
void ExpectF32(const char* op, const char* name, const Tensor& t) {
  Expect(t.device == Device::kCpu && t.dtype == DType::kF32 && (t.data || t.numel() == 0), op,
         name, " ", t.ShapeString(), " must be a float32 CPU tensor with data (dtype ",
         std::string(DTypeName(t.dtype)), ", device ", t.device == Device::kCpu ? "cpu" : "cuda", ")");
}

// [rows, cols] as the 2-D view of t.
void ExpectRows(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  ExpectF32(op, name, t);
  Expect(t.ndim >= 1 && t.dim(0) == rows && t.row_width() * rows == t.numel() &&
             (rows == 0 || t.row_width() == cols),
         op, name, " is ", t.ShapeString(), ", expected [", rows, ", ", cols, "]");
}

void ExpectVector(const char* op, const char* name, const Tensor& t, int64_t n) {
  ExpectF32(op, name, t);
  Expect(t.numel() == n, op, name, " is ", t.ShapeString(), ", expected [", n, "]");
}

}  // namespace

CpuBackend::CpuBackend(int num_threads) : num_threads_(std::max(1, num_threads)) {
  CpuGemmSetNumThreads(num_threads_);
}

std::unique_ptr<Backend> MakeCpuBackend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

Buffer CpuBackend::Allocate(DType dtype, std::span<const int64_t> shape) {
  Tensor t = Tensor::Describe(dtype, Device::kCpu, shape, "CpuBackend::Allocate");
  // calloc: zeroed, and large blocks stay unresident until written (the KV
  // cache, weight shards being loaded). Over-allocate to align by hand.
  const size_t bytes = t.nbytes() + kAlignment;
  void* raw = std::calloc(1, bytes);
  Expect(raw != nullptr, "Allocate", "out of memory allocating ", bytes, " bytes for ",
         t.ShapeString());
  const auto addr = reinterpret_cast<uintptr_t>(raw);
  t.data = reinterpret_cast<void*>((addr + kAlignment - 1) / kAlignment * kAlignment);
  return Buffer(t, [raw](void*) { std::free(raw); });
}

void CpuBackend::CopyFromHost(const void* src, DType src_dtype, Tensor dst) {
  Expect(dst.device == Device::kCpu && (dst.data || dst.numel() == 0), "CopyFromHost",
         "dst ", dst.ShapeString(), " must be a CPU tensor with data");
  if (dst.numel() == 0) return;
  Expect(src != nullptr, "CopyFromHost", "src is null for dst ", dst.ShapeString());
  ConvertDType(src, src_dtype, dst.data, dst.dtype, static_cast<size_t>(dst.numel()));
}

void CpuBackend::CopyToHostF32(const Tensor& src, float* dst) {
  Expect(src.device == Device::kCpu && (src.data || src.numel() == 0), "CopyToHostF32", "src ",
         src.ShapeString(), " must be a CPU tensor with data");
  if (src.numel() == 0) return;
  ConvertDType(src.data, src.dtype, dst, DType::kF32, static_cast<size_t>(src.numel()));
}

void CpuBackend::Copy(const Tensor& src, Tensor dst) {
  Expect(src.device == Device::kCpu && dst.device == Device::kCpu && src.dtype == dst.dtype &&
             src.numel() == dst.numel(),
         "Copy", "src ", src.ShapeString(), " ", std::string(DTypeName(src.dtype)), " and dst ",
         dst.ShapeString(), " ", std::string(DTypeName(dst.dtype)),
         " must be CPU tensors of the same dtype and size");
  if (src.numel() > 0 && src.data != dst.data) std::memmove(dst.data, src.data, src.nbytes());
}

absl::Status CpuBackend::BeginStep(const StepMetadata& step, int64_t num_blocks,
                                   int32_t block_size, int64_t max_position) {
  has_step_ = false;
  if (auto status = ValidateStep(step, num_blocks, block_size, max_position); !status.ok()) {
    return status;
  }
  OwnedStep& o = step_;
  o.token_ids.assign(step.token_ids.begin(), step.token_ids.end());
  o.positions.assign(step.positions.begin(), step.positions.end());
  o.slot_mapping.assign(step.slot_mapping.begin(), step.slot_mapping.end());
  o.query_start.assign(step.query_start.begin(), step.query_start.end());
  o.seq_lens.assign(step.seq_lens.begin(), step.seq_lens.end());
  o.block_tables.assign(step.block_tables.begin(), step.block_tables.end());
  o.logits_indices.assign(step.logits_indices.begin(), step.logits_indices.end());
  o.meta = step;
  o.meta.token_ids = o.token_ids;
  o.meta.positions = o.positions;
  o.meta.slot_mapping = o.slot_mapping;
  o.meta.query_start = o.query_start;
  o.meta.seq_lens = o.seq_lens;
  o.meta.block_tables = o.block_tables;
  o.meta.logits_indices = o.logits_indices;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  has_step_ = true;
  return absl::OkStatus();
}

const StepMetadata& CpuBackend::CurrentStep(const char* op) const {
  Expect(has_step_, op, "no current step: call BeginStep first (and check its Status)");
  return step_.meta;
}

void CpuBackend::Embedding(const Tensor& table, int64_t vocab_start, Tensor out) {
  const StepMetadata& step = CurrentStep("Embedding");
  const int64_t T = step.num_tokens(), D = out.row_width();
  ExpectRows("Embedding", "out", out, T, D);
  ExpectRows("Embedding", "table", table, table.dim(0), D);
  CpuEmbedding(step.token_ids.data(), T, table.ptr<float>(), table.dim(0), D, vocab_start,
               out.ptr<float>());
}

void CpuBackend::Linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y) {
  const int64_t M = x.dim(0), K = x.row_width(), N = w.dim(0);
  ExpectRows("Linear", "x", x, M, K);
  ExpectRows("Linear", "w", w, N, K);
  ExpectRows("Linear", "y", y, M, N);
  if (bias) ExpectVector("Linear", "bias", *bias, N);
  Expect(y.data != x.data && y.data != w.data, "Linear", "y must not alias x or w");
  CpuGemm(x.ptr<float>(), w.ptr<float>(), bias ? bias->ptr<float>() : nullptr, y.ptr<float>(), M,
          N, K);
}

void CpuBackend::RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor out) {
  const int64_t M = x.dim(0), D = x.row_width();
  ExpectRows("RmsNorm", "x", x, M, D);
  ExpectRows("RmsNorm", "out", out, M, D);
  ExpectVector("RmsNorm", "w", w, D);
  CpuRmsNorm(x.ptr<float>(), w.ptr<float>(), eps, M, D, out.ptr<float>());
}

void CpuBackend::AddRmsNorm(Tensor x, Tensor residual, const Tensor& w, float eps) {
  const int64_t M = x.dim(0), D = x.row_width();
  ExpectRows("AddRmsNorm", "x", x, M, D);
  ExpectRows("AddRmsNorm", "residual", residual, M, D);
  ExpectVector("AddRmsNorm", "w", w, D);
  CpuAddRmsNorm(x.ptr<float>(), residual.ptr<float>(), w.ptr<float>(), eps, M, D);
}

void CpuBackend::QkNormRope(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm,
                            const Tensor* k_norm, float eps, const Tensor& rope) {
  const StepMetadata& step = CurrentStep("QkNormRope");
  const int64_t T = step.num_tokens(), hd = shape.head_dim;
  Expect(shape.num_heads > 0 && shape.num_kv_heads > 0 && hd > 0 && hd % 2 == 0 &&
             shape.num_heads % shape.num_kv_heads == 0,
         "QkNormRope", "bad AttentionShape Hq=", shape.num_heads, " Hkv=", shape.num_kv_heads,
         " hd=", hd);
  ExpectRows("QkNormRope", "qkv", qkv, T, shape.qkv_width());
  ExpectRows("QkNormRope", "rope", rope, rope.dim(0), hd);
  if (q_norm) ExpectVector("QkNormRope", "q_norm", *q_norm, hd);
  if (k_norm) ExpectVector("QkNormRope", "k_norm", *k_norm, hd);
  const int32_t max_pos =
      T > 0 ? *std::max_element(step.positions.begin(), step.positions.end()) : 0;
  if (T > 0 && max_pos >= rope.dim(0)) {
    Die("QkNormRope", absl::StrCat("position ", max_pos, " is beyond the rope table ",
                                   rope.ShapeString(),
                                   "; pass BeginStep the table's length as max_position"));
  }
  CpuQkNormRope(qkv.ptr<float>(), T, step.positions.data(), shape,
                q_norm ? q_norm->ptr<float>() : nullptr, k_norm ? k_norm->ptr<float>() : nullptr,
                eps, rope.ptr<float>());
}

void CpuBackend::SiluMul(const Tensor& gate_up, Tensor out) {
  const int64_t M = gate_up.dim(0), F = out.row_width();
  ExpectRows("SiluMul", "gate_up", gate_up, M, 2 * F);
  ExpectRows("SiluMul", "out", out, M, F);
  CpuSiluMul(gate_up.ptr<float>(), M, F, out.ptr<float>());
}

namespace {
// The cache tensors must match the geometry BeginStep validated against.
void ExpectCache(const char* op, const KvCacheLayer& cache, const AttentionShape& shape,
                 int64_t num_blocks, int32_t block_size) {
  for (const Tensor* t : {&cache.k, &cache.v}) {
    ExpectF32(op, t == &cache.k ? "cache.k" : "cache.v", *t);
    Expect(t->ndim == 4 && t->dim(0) == num_blocks && t->dim(1) == block_size &&
               t->dim(2) == shape.num_kv_heads && t->dim(3) == shape.head_dim,
           op, "cache ", t->ShapeString(), " must be [num_blocks=", num_blocks,
           ", block_size=", block_size, ", Hkv=", shape.num_kv_heads, ", hd=", shape.head_dim,
           "] as given to BeginStep");
  }
}
}  // namespace

void CpuBackend::StoreKv(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache) {
  const StepMetadata& step = CurrentStep("StoreKv");
  ExpectRows("StoreKv", "qkv", qkv, step.num_tokens(), shape.qkv_width());
  ExpectCache("StoreKv", cache, shape, step_.num_blocks, step_.block_size);
  CpuStoreKv(step, qkv.ptr<float>(), shape, cache);
}

void CpuBackend::Attention(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache,
                           float scale, Tensor out) {
  const StepMetadata& step = CurrentStep("Attention");
  const int64_t T = step.num_tokens();
  Expect(shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0, "Attention",
         "Hq=", shape.num_heads, " is not a multiple of Hkv=", shape.num_kv_heads);
  ExpectRows("Attention", "qkv", qkv, T, shape.qkv_width());
  ExpectRows("Attention", "out", out, T, int64_t{shape.num_heads} * shape.head_dim);
  ExpectCache("Attention", cache, shape, step_.num_blocks, step_.block_size);
  CpuAttention(step, qkv.ptr<float>(), shape, cache, scale, out.ptr<float>());
}

void CpuBackend::GatherRows(const Tensor& x, Tensor out) {
  const StepMetadata& step = CurrentStep("GatherRows");
  const int64_t S = step.num_seqs(), D = x.row_width();
  ExpectRows("GatherRows", "x", x, step.num_tokens(), D);
  ExpectRows("GatherRows", "out", out, S, D);
  CpuGatherRows(x.ptr<float>(), D, step.logits_indices.data(), S, out.ptr<float>());
}

}  // namespace tpserve
