// NcclCommunicator: collectives between GPUs with NCCL, enqueued on the
// worker's compute stream. Built only when TPSERVE_WITH_CUDA and NCCL is found
// (TPSERVE_WITH_NCCL is then defined for users of tpserve_comm).
//
// Rendezvous: rank 0 creates the ncclUniqueId and publishes it in the Store
// (the coordinator in production); the others read it from there.
//
// Asynchrony: AllReduceSum, Gather, AllGather and Broadcast enqueue work on
// `stream` and return once it is enqueued (an error NCCL reports at that point,
// or an asynchronous error left by an earlier call, is returned). Barrier and
// Synchronize wait for the stream, polling ncclCommGetAsyncError; after
// `timeout` without progress (a dead or missing peer) the communicator is
// aborted and DEADLINE_EXCEEDED is returned; it stays broken afterwards.
// All tensors must be kCuda tensors on this communicator's device.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/store.h"

namespace tpserve {

struct NcclOptions {
  int device = 0;                 // CUDA device of this rank (its local rank)
  cudaStream_t stream = nullptr;  // compute stream the collectives run on
  // Bound for the rendezvous + communicator creation and for Barrier/Synchronize.
  std::chrono::milliseconds timeout = std::chrono::seconds(120);
};

class NcclCommunicator : public Communicator {
 public:
  // Errors: INVALID_ARGUMENT (rank/world size/device), DEADLINE_EXCEEDED when
  // the unique id or a peer does not arrive in time, UNAVAILABLE/INTERNAL for
  // NCCL failures (the message names the NCCL call and its error string).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      Store& store, int rank, int world_size, const NcclOptions& options);

  ~NcclCommunicator() override = default;

  // Waits until the collectives enqueued so far have finished (see above).
  virtual absl::Status Synchronize() = 0;

  // The collectives only enqueue NCCL kernels on the stream: capturable.
  bool SupportsGraphCapture() const override { return true; }

 protected:
  NcclCommunicator() = default;
};

}  // namespace tpserve
