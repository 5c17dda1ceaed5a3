#include "cuda/check.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tpserve::cuda {

void FailCuda(const char* stmt, const char* file, int line, const char* what) {
  int device = -1;
  cudaGetDevice(&device);  // best effort: the device is part of the report
  base::CheckFailed(file, line, stmt, absl::StrCat("CUDA error on device ", device, ": ", what));
}

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

namespace {
thread_local cudaStream_t capture_stream = nullptr;
}  // namespace

void SetCaptureStream(cudaStream_t stream) { capture_stream = stream; }

bool CapturingOnThisThread() {
  if (capture_stream == nullptr) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // A failed query (e.g. an invalidated capture) counts as capturing: never
  // synchronise inside a capture.
  if (cudaStreamIsCapturing(capture_stream, &status) != cudaSuccess) return true;
  return status != cudaStreamCaptureStatusNone;
}

bool SyncCheckFromEnvironment() {
  static const bool on = [] {
    const char* v = std::getenv("TPSERVE_CUDA_SYNC_CHECK");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace tpserve::cuda
