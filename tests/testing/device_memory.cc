#include "tests/testing/device_memory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cpu_backend.h"

namespace tpserve::testing_util {

DeviceMemoryBackend::DeviceMemoryBackend() : inner_(MakeCpuBackend()) {}

absl::StatusOr<Buffer> DeviceMemoryBackend::TryAllocate(DType dtype, std::span<const int64_t> shape) {
  absl::StatusOr<Buffer> inner = inner_->TryAllocate(dtype, shape);
  if (!inner.ok()) return inner.status();
  const Tensor view = inner->tensor();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(view.data);
  {
    absl::MutexLock lock(&live_->mu);
    live_->ranges[begin] = begin + view.nbytes();
  }
  auto held = std::make_shared<Buffer>(*std::move(inner));
  return Buffer(view, [live = live_, held, begin](void*) {
    {
      absl::MutexLock lock(&live->mu);
      live->ranges.erase(begin);
    }
    held->Reset();
  });
}

bool DeviceMemoryBackend::Owns(const Tensor& t) const {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data);
  absl::MutexLock lock(&live_->mu);
  auto it = live_->ranges.upper_bound(begin);
  if (it == live_->ranges.begin()) return false;
  --it;
  return begin >= it->first && begin + t.nbytes() <= it->second;
}

namespace {

class DeviceOnlyCommunicator final : public Communicator {
 public:
  DeviceOnlyCommunicator(std::unique_ptr<Communicator> inner, const DeviceMemoryBackend& backend)
      : inner_(std::move(inner)), backend_(backend) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllReduceSum(Tensor t) override {
    if (absl::Status s = OnDevice(t, "AllReduceSum", "t"); !s.ok()) return s;
    return inner_->AllReduceSum(t);
  }
  absl::Status Gather(const Tensor& in, Tensor out) override {
    if (absl::Status s = OnDevice(in, "Gather", "in"); !s.ok()) return s;
    if (rank() == 0) {  // other ranks may pass an empty out (communicator.h)
      if (absl::Status s = OnDevice(out, "Gather", "out"); !s.ok()) return s;
    }
    return inner_->Gather(in, out);
  }
  absl::Status AllGather(const Tensor& in, Tensor out) override {
    if (absl::Status s = OnDevice(in, "AllGather", "in"); !s.ok()) return s;
    if (absl::Status s = OnDevice(out, "AllGather", "out"); !s.ok()) return s;
    return inner_->AllGather(in, out);
  }
  absl::Status Broadcast(Tensor t, int root) override {
    if (absl::Status s = OnDevice(t, "Broadcast", "t"); !s.ok()) return s;
    return inner_->Broadcast(t, root);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  bool SupportsGraphCapture() const override { return inner_->SupportsGraphCapture(); }

 private:
  // NcclCommunicator's words for a CPU tensor.
  absl::Status OnDevice(const Tensor& t, const char* op, const char* name) const {
    if (t.data == nullptr && t.numel() == 0) return absl::OkStatus();
    if (backend_.Owns(t)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": tensor '", name, "' is host memory, not a buffer of the backend; the NCCL communicator takes "
        "device tensors only (allocate it with Backend::Allocate)"));
  }

  std::unique_ptr<Communicator> inner_;
  const DeviceMemoryBackend& backend_;
};

}  // namespace

std::unique_ptr<Communicator> MakeDeviceOnlyCommunicator(std::unique_ptr<Communicator> inner,
                                                         const DeviceMemoryBackend& backend) {
  return std::make_unique<DeviceOnlyCommunicator>(std::move(inner), backend);
}

}  // namespace tpserve::testing_util
