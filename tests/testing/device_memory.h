// A stand-in for device memory on a machine without a GPU, to test the one
// rule of the NCCL communicator that the CPU cannot otherwise show: it takes
// device buffers only, and refuses a host tensor (comm/nccl_communicator.cc).
// Code that hands a collective a std::vector's data, a stack array or any other
// host memory works over gloo and fails on its first step over NCCL.
//
//   DeviceMemoryBackend: the CPU backend (it still says Device::kCpu, so the
//     model behaves exactly as on the CPU) whose allocations are recorded as
//     "device memory" until their Buffer is freed;
//   DeviceOnlyCommunicator: wraps any communicator (gloo, solo) and answers
//     INVALID_ARGUMENT, as NCCL does, for a tensor that does not lie inside one
//     live allocation of that backend; otherwise forwards the call.
//
// Use them together for every rank of an engine or step-runner test.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "comm/communicator.h"

namespace tpserve::testing_util {

class DeviceMemoryBackend final : public Backend {
 public:
  DeviceMemoryBackend();

  // Whether [t.data, t.data + t.nbytes()) lies inside one live allocation.
  bool Owns(const Tensor& t) const;

  std::string name() const override { return "device-memory-cpu"; }
  Device device() const override { return inner_->device(); }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  using Backend::TryAllocate;
  absl::StatusOr<Buffer> TryAllocate(DType dtype, std::span<const int64_t> shape) override;
  void CopyFromHost(const void* src, DType src_dtype, Tensor dst) override {
    inner_->CopyFromHost(src, src_dtype, dst);
  }
  void CopyToHostF32(const Tensor& src, float* dst) override { inner_->CopyToHostF32(src, dst); }
  void Copy(const Tensor& src, Tensor dst) override { inner_->Copy(src, dst); }
  void Synchronize() override { inner_->Synchronize(); }
  absl::Status Reserve(const StepCapacity& capacity) override { return inner_->Reserve(capacity); }
  absl::Status BeginStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                         int64_t max_position) override {
    return inner_->BeginStep(step, num_blocks, block_size, max_position);
  }
  void Embedding(const Tensor& table, int64_t vocab_start, Tensor out) override {
    inner_->Embedding(table, vocab_start, out);
  }
  void Linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y) override {
    inner_->Linear(x, w, bias, y);
  }
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, Tensor out) override { inner_->RmsNorm(x, w, eps, out); }
  void AddRmsNorm(Tensor x, Tensor residual, const Tensor& w, float eps) override {
    inner_->AddRmsNorm(x, residual, w, eps);
  }
  void QkNormRope(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm, const Tensor* k_norm, float eps,
                  const Tensor& rope) override {
    inner_->QkNormRope(qkv, shape, q_norm, k_norm, eps, rope);
  }
  void SiluMul(const Tensor& gate_up, Tensor out) override { inner_->SiluMul(gate_up, out); }
  void LinearSiluMul(const Tensor& x, const Tensor& w_gate_up, Tensor gate_up, Tensor out) override {
    inner_->LinearSiluMul(x, w_gate_up, gate_up, out);
  }
  void StoreKv(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache) override {
    inner_->StoreKv(qkv, shape, cache);
  }
  void QkNormRopeStoreKv(Tensor qkv, const AttentionShape& shape, const Tensor* q_norm, const Tensor* k_norm,
                         float eps, const Tensor& rope, KvCacheLayer cache) override {
    inner_->QkNormRopeStoreKv(qkv, shape, q_norm, k_norm, eps, rope, cache);
  }
  void Attention(const Tensor& qkv, const AttentionShape& shape, KvCacheLayer cache, float scale,
                 Tensor out) override {
    inner_->Attention(qkv, shape, cache, scale, out);
  }
  void GatherRows(const Tensor& x, Tensor out) override { inner_->GatherRows(x, out); }

 private:
  // Shared with the free functions of the Buffers handed out, which may
  // outlive the backend.
  struct Live {
    mutable absl::Mutex mu;
    std::map<uintptr_t, uintptr_t> ranges ABSL_GUARDED_BY(mu);  // begin -> end
  };
  std::unique_ptr<Backend> inner_;
  std::shared_ptr<Live> live_ = std::make_shared<Live>();
};

// `backend` must outlive the communicator.
std::unique_ptr<Communicator> MakeDeviceOnlyCommunicator(std::unique_ptr<Communicator> inner,
                                                         const DeviceMemoryBackend& backend);

}  // namespace tpserve::testing_util
