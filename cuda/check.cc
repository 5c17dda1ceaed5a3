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

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    count = 0;
  }
  if (count == 0 && why != nullptr) {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) {
      cudaGetLastError();
      driver = 0;
    }
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) cudaGetLastError();
    *why = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                        "); driver CUDA version ", driver / 1000, ".", driver % 1000 / 10,
                        driver == 0 ? " (no driver)" : "", ", runtime ", runtime / 1000, ".", runtime % 1000 / 10);
  }
  return count;
}

bool GpuRequiredByEnvironment() {
  static const bool on = [] {
    const char* v = std::getenv("TPSERVE_REQUIRE_GPU");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
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
