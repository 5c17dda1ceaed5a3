#include "cuda/device_info.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "cuda/check.h"

namespace tpserve::cuda {

absl::StatusOr<DeviceInfo> QueryDevice(int device) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA device ", device, " does not exist: ", count,
        " device(s) are visible (check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES)"));
  }
  DeviceInfo info;
  info.index = device;
  cudaDeviceProp prop{};
  if (cudaError_t err = cudaGetDeviceProperties(&prop, device); err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("cudaGetDeviceProperties(", device, ") failed: ", cudaGetErrorString(err)));
  }
  info.name = prop.name;
  info.multiprocessors = prop.multiProcessorCount;
  info.compute_major = prop.major;
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("cannot use CUDA device ", device, " (", info.name,
                                               "): ", cudaGetErrorString(err)));
  }
  info.free_bytes = free_bytes;
  info.total_bytes = total_bytes;
  return info;
}

}  // namespace tpserve::cuda
