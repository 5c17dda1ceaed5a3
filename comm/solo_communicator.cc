// The world-size-1 Communicator: nothing to exchange, only copies.
#include "comm/collective_args.h"
#include "comm/communicator.h"
#include "comm/device_copy.h"

namespace tpserve {
namespace {

using comm_internal::CheckGathered;
using comm_internal::CheckRoot;
using comm_internal::CheckTensor;
using comm_internal::CopyBytes;

class SoloCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }

  absl::Status AllReduceSum(Tensor t) override { return CheckTensor(t, "AllReduceSum", "t"); }

  absl::Status Gather(const Tensor& in, Tensor out) override {
    if (absl::Status s = CheckGathered(in, out, 1, "Gather"); !s.ok()) return s;
    return CopyBytes(out.data, out.device, in.data, in.device, in.nbytes());
  }

  absl::Status AllGather(const Tensor& in, Tensor out) override {
    if (absl::Status s = CheckGathered(in, out, 1, "AllGather"); !s.ok()) return s;
    return CopyBytes(out.data, out.device, in.data, in.device, in.nbytes());
  }

  absl::Status Broadcast(Tensor t, int root) override {
    if (absl::Status s = CheckRoot(root, 1, "Broadcast"); !s.ok()) return s;
    return CheckTensor(t, "Broadcast", "t");
  }

  absl::Status Barrier() override { return absl::OkStatus(); }

  // The model skips its collectives at world size 1 (AllReduceSum and
  // Broadcast enqueue nothing anyway); only Gather/AllGather copy, synchronously.
  bool SupportsGraphCapture() const override { return true; }
};

}  // namespace

std::unique_ptr<Communicator> MakeSoloCommunicator() {
  return std::make_unique<SoloCommunicator>();
}

}  // namespace tpserve
