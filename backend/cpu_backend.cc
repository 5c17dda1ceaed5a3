#include "backend/cpu_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "backend/cpu_attention.h"
#include "backend/cpu_gemm.h"
#include "backend/cpu_ops.h"
#include "backend/op_checks.h"
#include "backend/step_validation.h"
#include "base/check.h"

namespace tpserve {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; also what AVX-512 loads like

constexpr OperandKind kCpuF32{"CpuBackend", Device::kCpu, DType::kF32};

// Shape mismatches are programming errors (backend.h): op_checks.h ends the
// process naming the op and the shapes. The operands are float32 CPU tensors.
void Expect(bool ok, const char* op, const auto&... what) { CheckOp(kCpuF32, ok, op, what...); }
void ExpectRows(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  CheckRows(kCpuF32, op, name, t, rows, cols);
}
void ExpectVector(const char* op, const char* name, const Tensor& t, int64_t n) { CheckVector(kCpuF32, op, name, t, n); }

}  // namespace

CpuBackend::CpuBackend(int num_threads)
    : num_threads_(std::max(1, num_threads)), gemm_threads_(num_threads_) {}

std::unique_ptr<Backend> MakeCpuBackend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

absl::StatusOr<Buffer> CpuBackend::TryAllocate(DType dtype, std::span<const int64_t> shape) {
  Tensor t = Tensor::Describe(dtype, Device::kCpu, shape, "CpuBackend::Allocate");
  // calloc: zeroed, and large blocks stay unresident until written (the KV
  // cache, weight shards being loaded). Over-allocate to align by hand.
  size_t bytes = 0;
  const bool overflow =
      __builtin_mul_overflow(static_cast<size_t>(t.numel()), DTypeSize(dtype), &bytes) ||
      __builtin_add_overflow(bytes, kAlignment, &bytes);
  // More than the machine's physical memory can never be backed: refuse it
  // before calloc, which may hand out unbacked address space (overcommit) or,
  // under a sanitizer, abort instead of returning null.
  const uint64_t physical = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
  void* raw = overflow || bytes > physical ? nullptr : std::calloc(1, bytes);
  if (raw == nullptr) {
    const int64_t free_bytes = int64_t{sysconf(_SC_AVPHYS_PAGES)} * sysconf(_SC_PAGESIZE);
    return absl::ResourceExhaustedError(absl::StrCat(
        "CpuBackend::Allocate: out of memory allocating ", t.ShapeString(), " ", std::string(DTypeName(dtype)),
        " (", overflow ? std::string("more than 2^64") : absl::StrCat(bytes), " bytes asked, ",
        free_bytes, " bytes of physical memory free)"));
  }
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
  step_.batch.CopyFrom(step);
  step_.num_blocks = num_blocks;
  step_.block_size = block_size;
  has_step_ = true;
  return absl::OkStatus();
}

StepMetadata CpuBackend::CurrentStep(const char* op) const {
  Expect(has_step_, op, "no current step: call BeginStep first (and check its Status)");
  return step_.batch.view();
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
  CheckLinear(kCpuF32, x, w, bias, y);
  CpuGemm(x.ptr<float>(), w.ptr<float>(), bias ? bias->ptr<float>() : nullptr, y.ptr<float>(), M, N, K,
          &gemm_threads_);
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
    OpFailed(kCpuF32.backend, "QkNormRope",
             absl::StrCat("position ", max_pos, " is beyond the rope table ", rope.ShapeString(),
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
    CheckOperand(kCpuF32, op, t == &cache.k ? "cache.k" : "cache.v", *t);
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
  const int64_t R = step.num_logits_rows(), D = x.row_width();
  ExpectRows("GatherRows", "x", x, step.num_tokens(), D);
  ExpectRows("GatherRows", "out", out, R, D);
  CpuGatherRows(x.ptr<float>(), D, step.logits_indices.data(), R, out.ptr<float>());
}

}  // namespace tpserve
