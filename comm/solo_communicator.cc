// The world-size-1 Communicator: nothing to exchange, only copies.
#include "comm/collective_args.h"
#include "comm/communicator.h"
#include "comm/device_copy.h"

namespace tpserve {
namespace {

class SoloCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }

  absl::Status AllReduceSum(Tensor t) override {
    return comm_internal::CheckTensor(t, "AllReduceSum", "t");
  }
  absl::Status Gather(const Tensor& in, Tensor out) override { return CopyToOut(in, out, "Gather"); }
  absl::Status AllGather(const Tensor& in, Tensor out) override {
    return CopyToOut(in, out, "AllGather");
  }

  absl::Status Broadcast(Tensor t, int root) override {
    if (absl::Status s = comm_internal::CheckRoot(root, 1, "Broadcast"); !s.ok()) return s;
    return comm_internal::CheckTensor(t, "Broadcast", "t");
  }

  absl::Status Barrier() override { return absl::OkStatus(); }

  // The model skips its collectives at world size 1 (AllReduceSum and
  // Broadcast enqueue nothing anyway); only Gather/AllGather copy, synchronously.
  bool SupportsGraphCapture() const override { return true; }

 private:
  // Both gathers at world size 1: out ([1, ...in's shape]) = in.
  static absl::Status CopyToOut(const Tensor& in, const Tensor& out, const char* op) {
    if (absl::Status s = comm_internal::CheckGathered(in, out, 1, op); !s.ok()) return s;
    return comm_internal::CopyBytes(out.data, out.device, in.data, in.device, in.nbytes());
  }
};

}  // namespace

std::unique_ptr<Communicator> MakeSoloCommunicator() {
  return std::make_unique<SoloCommunicator>();
}

}  // namespace tpserve
