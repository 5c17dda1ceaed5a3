#include "cuda/cuda_graph.h"

#include "absl/strings/str_cat.h"
#include "cuda/check.h"

namespace tpserve::cuda {
namespace {

absl::Status Internal(const char* what, cudaError_t err) {
  cudaGetLastError();  // not sticky: clear it so later launches are not blamed
  return absl::InternalError(absl::StrCat(what, " failed: ", cudaGetErrorString(err),
                                          "; run with --enforce-eager to serve without CUDA graphs"));
}

}  // namespace

CudaGraph::~CudaGraph() { cudaGraphExecDestroy(exec_); }

void CudaGraph::Replay() {
  CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  TPSERVE_SYNC_CHECK();
}

absl::Status BeginStreamCapture(cudaStream_t stream) {
  if (cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
      err != cudaSuccess) {
    return Internal("cudaStreamBeginCapture", err);
  }
  SetCaptureStream(stream);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BackendGraph>> EndStreamCapture(cudaStream_t stream) {
  SetCaptureStream(nullptr);
  cudaGraph_t graph = nullptr;
  if (cudaError_t err = cudaStreamEndCapture(stream, &graph); err != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return Internal("cudaStreamEndCapture (the capture was invalidated by a call that cannot be "
                    "captured: a synchronisation, an allocation or a host copy inside it)",
                    err);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  if (err != cudaSuccess) return Internal("cudaGraphInstantiate", err);
  return std::unique_ptr<BackendGraph>(std::make_unique<CudaGraph>(exec, stream));
}

}  // namespace tpserve::cuda
