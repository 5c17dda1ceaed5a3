// CpuBackend: the fp32 oracle implementation of Backend (backend.h).
//
// Weights and activations are float32 in host memory; GEMM is cpu_gemm.h on
// the backend's own threads, the row ops are plain loops (cpu_ops.h),
// attention and the K/V store are cpu_attention.h. Ops run synchronously.
//
// Batch-invariant, always: every op computes a row (a token, or a sequence's
// logits) from that row alone, in an order that does not depend on the rows
// beside it, so a sequence's logits are bitwise the same whatever it is
// batched with, however its prefill was chunked, whether its prefix came from
// the cache, and after a preemption (docs/architecture.md, "The CPU backend's
// numerics").
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu_gemm.h"
#include "backend/step_batch.h"

namespace tpserve {

class CpuBackend final : public Backend {
 public:
  // num_threads: threads the GEMMs use (this backend's own; at least 1).
  explicit CpuBackend(int num_threads = 1);

  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::kCpu; }
  DType compute_dtype() const override { return DType::kF32; }
  int num_threads() const { return num_threads_; }

  using Backend::TryAllocate;
  // RESOURCE_EXHAUSTED when calloc fails, naming the bytes asked and the
  // physical memory free.
  absl::StatusOr<Buffer> TryAllocate(DType dtype, std::span<const int64_t> shape) override;
  void CopyFromHost(const void* src, DType src_dtype, Tensor dst) override;
  void CopyToHostF32(const Tensor& src, float* dst) override;
  void Copy(const Tensor& src, Tensor dst) override;
  void Synchronize() override {}

  absl::Status BeginStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                         int64_t max_position) override;

  void Embedding(const Tensor& table, int64_t vocab_start, Tensor out) override;
  void Linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y) override;
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor out) override;
  void AddRmsNorm(Tensor x, Tensor residual, const Tensor& w, float eps) override;
  void QkNormRope(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm,
                  const Tensor* k_norm, float eps, const Tensor& rope) override;
  void SiluMul(const Tensor& gate_up, Tensor out) override;
  void StoreKv(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache) override;
  void Attention(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache, float scale,
                 Tensor out) override;
  void GatherRows(const Tensor& x, Tensor out) override;

 private:
  // The current step: an owned copy of the caller's arrays (they need not
  // outlive BeginStep) and the cache geometry BeginStep checked it against.
  struct ValidatedStep {
    StepBatch batch;
    int64_t num_blocks = 0;
    int32_t block_size = 0;
  };
  StepMetadata CurrentStep(const char* op) const;

  int num_threads_;
  CpuGemmThreads gemm_threads_;
  bool has_step_ = false;
  ValidatedStep step_;
};

// The CPU backend with `num_threads` GEMM threads (at least 1).
std::unique_ptr<Backend> MakeCpuBackend(int num_threads = 1);

}  // namespace tpserve
