#include "rank/gpu_query.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#ifdef TPSERVE_WITH_CUDA
#include "cuda/check.h"
#include "cuda/device_info.h"
#endif

namespace tpserve {
namespace {

#ifdef TPSERVE_WITH_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif
#ifdef TPSERVE_WITH_GLOO
constexpr bool kHaveGloo = true;
#else
constexpr bool kHaveGloo = false;
#endif

[[maybe_unused]] absl::Status NoCudaError() {
  return absl::FailedPreconditionError(
      "--backend cuda: this program was built without CUDA (nvcc was not found when it was built); "
      "rebuild on a machine with the CUDA toolkit (and a GPU visible through CUDA_VISIBLE_DEVICES), "
      "or run with --backend cpu");
}

}  // namespace

bool BuiltWithCuda() {
#ifdef TPSERVE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<GpuPlacement> PlaceRankOnGpu(const RankEnv& env) {
#ifdef TPSERVE_WITH_CUDA
  return PlaceOnGpu(env, cuda::DeviceCount(), kHaveNccl, kHaveGloo);
#else
  (void)env;
  (void)kHaveNccl;
  (void)kHaveGloo;
  return NoCudaError();
#endif
}

absl::StatusOr<GpuInfo> QueryGpu(int device) {
#ifdef TPSERVE_WITH_CUDA
  TPSERVE_ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::QueryDevice(device));
  return GpuInfo{.device = info.index, .name = info.name, .free_bytes = info.free_bytes,
                 .total_bytes = info.total_bytes};
#else
  (void)device;
  return NoCudaError();
#endif
}

absl::StatusOr<GpuInfo> QueryRankGpu(const RankEnv& env) {
#ifdef TPSERVE_WITH_CUDA
  const int count = cuda::DeviceCount();
  if (count <= 0) return PlaceRankOnGpu(env).status();  // the "sees no CUDA device" error
  absl::StatusOr<GpuPlacement> place = PlaceRankOnGpu(env);
  return QueryGpu(place.ok() ? place->device : env.local_rank % count);
#else
  (void)env;
  return NoCudaError();
#endif
}

}  // namespace tpserve
