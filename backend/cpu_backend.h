// CpuBackend: the fp32 oracle implementation of Backend (backend.h).
//
// Weights and activations are float32 in host memory; GEMM goes through OpenBLAS
// when the build has it (cpu_gemm.h), the row ops are plain loops (cpu_ops.h),
// attention and the K/V store are cpu_attention.h. Ops run synchronously.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/step_batch.h"

namespace tpserve {

class CpuBackend final : public Backend {
 public:
  // num_threads: threads OpenBLAS may use for GEMM (process-wide setting).
  // batch_invariant: every GEMM takes CpuGemmFallback (single-threaded), whose
  // rows do not depend on the batch (cpu_gemm.h), so a sequence's logits are
  // bitwise the same whatever it is batched with, chunked or preempted.
  explicit CpuBackend(int num_threads = 1, bool batch_invariant = false);

  std::string name() const override { return batch_invariant_ ? "cpu (batch-invariant)" : "cpu"; }
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
  bool batch_invariant_;
  bool has_step_ = false;
  ValidatedStep step_;
};

// The CPU backend with `num_threads` GEMM threads (at least 1), batch-invariant
// or not (CpuBackend's constructor).
std::unique_ptr<Backend> MakeCpuBackend(int num_threads = 1, bool batch_invariant = false);

// The environment variable that makes a worker's CPU backend batch-invariant
// ("1"; "0" or unset: not), for reproducible outputs and the tests that compare
// two servers' sampled tokens.
inline constexpr char kBatchInvariantEnv[] = "TPSERVE_BATCH_INVARIANT";
// TPSERVE_BATCH_INVARIANT as a bool; INVALID_ARGUMENT naming it for a value
// other than "0", "1" or empty.
absl::StatusOr<bool> BatchInvariantFromEnvironment();

}  // namespace tpserve
