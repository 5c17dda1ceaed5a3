// CopyBytes for CUDA builds (see device_copy.h): cudaMemcpy, errors as Status.
#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "comm/device_copy.h"

namespace tpserve::comm_internal {

absl::Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  if (n == 0) return absl::OkStatus();
  if (dst_device == Device::kCpu && src_device == Device::kCpu) {
    std::memcpy(dst, src, n);
    return absl::OkStatus();
  }
  cudaMemcpyKind kind = dst_device == Device::kCpu   ? cudaMemcpyDeviceToHost
                        : src_device == Device::kCpu ? cudaMemcpyHostToDevice
                                                     : cudaMemcpyDeviceToDevice;
  cudaError_t err = cudaMemcpy(dst, src, n, kind);
  if (err != cudaSuccess) {
    int device = -1;
    cudaGetDevice(&device);
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("communicator: cudaMemcpy of ", n,
                                            " bytes failed on device ", device, ": ",
                                            cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace tpserve::comm_internal
