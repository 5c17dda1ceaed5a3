// CUDA graph capture of one stream's work, behind Backend's graph API
// (backend/backend.h "CUDA graphs"; CudaBackend uses these).
//
// Capture mode is cudaStreamCaptureModeThreadLocal: only the capturing thread
// is barred from unsafe calls (cudaMalloc, synchronisation), so other threads
// (another rank's thread in a test) may allocate meanwhile. Work on the legacy
// stream from any thread (a synchronous cudaMemcpy, as comm/device_copy_cuda.cc
// stages gloo's buffers) still breaks the capture with
// cudaErrorStreamCaptureImplicit, the backend's stream being a blocking one;
// graphs are only captured over a communicator that SupportsGraphCapture.
// While a capture is open, TPSERVE_SYNC_CHECK skips its device
// synchronisation (cuda/check.h).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"

namespace tpserve::cuda {

// An instantiated graph that replays on `stream` (the stream it was captured on).
class CudaGraph final : public BackendGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // cudaGraphLaunch on the stream; returns once enqueued.
  void Replay() override;

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

// Starts capturing `stream` on this thread. INTERNAL when the runtime refuses
// (e.g. the stream is already capturing).
absl::Status BeginStreamCapture(cudaStream_t stream);

// Ends the capture of `stream` and instantiates the graph. INTERNAL when the
// capture was invalidated by a call that cannot be captured (the message names
// the runtime's error; run with --enforce-eager meanwhile).
absl::StatusOr<std::unique_ptr<BackendGraph>> EndStreamCapture(cudaStream_t stream);

}  // namespace tpserve::cuda
