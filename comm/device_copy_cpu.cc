// CopyBytes for builds without CUDA (see device_copy.h).
#include <cstring>

#include "comm/device_copy.h"

namespace tpserve::comm_internal {

absl::Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  if (dst_device != Device::kCpu || src_device != Device::kCpu) {
    return absl::FailedPreconditionError(
        "communicator: a CUDA tensor was passed, but tpserve was built without CUDA "
        "(reconfigure with -DTPSERVE_CUDA=ON on a machine with the CUDA toolkit)");
  }
  if (n > 0) std::memcpy(dst, src, n);
  return absl::OkStatus();
}

}  // namespace tpserve::comm_internal
