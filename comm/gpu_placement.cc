#include "comm/gpu_placement.h"

#include "absl/strings/str_cat.h"

namespace tpserve {

std::string_view CommKindName(CommKind kind) {
  switch (kind) {
    case CommKind::kSolo: return "solo";
    case CommKind::kNccl: return "nccl";
    case CommKind::kGloo: return "gloo";
  }
  return "?";
}

absl::StatusOr<GpuPlacement> PlaceOnGpu(const RankEnv& env, int device_count, bool have_nccl,
                                        bool have_gloo) {
  if (device_count <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--backend cuda, but rank ", env.rank,
        " sees no CUDA device (check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES), or serve with "
        "--backend cpu"));
  }
  const int local_ranks = env.local_ranks();
  GpuPlacement p;
  p.device = env.local_rank % device_count;
  p.ranks_per_device = 0;
  for (int r = 0; r < local_ranks; ++r) p.ranks_per_device += (r % device_count == p.device);
  if (p.ranks_per_device < 1) p.ranks_per_device = 1;  // a local rank beyond the local world size
  if (env.world_size == 1) {
    p.comm = CommKind::kSolo;
    return p;
  }
  const bool own_gpu = local_ranks <= device_count;
  if (own_gpu && have_nccl) {
    p.comm = CommKind::kNccl;
    return p;
  }
  if (have_gloo) {
    p.comm = CommKind::kGloo;
    return p;
  }
  if (own_gpu) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor parallelism over ", env.world_size,
        " CUDA ranks needs NCCL (the CUDA toolkit's) or gloo (libgloo-dev), and this build has neither; "
        "rebuild with one of them"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      local_ranks, " ranks on this host share ", device_count,
      " GPU(s), which only the gloo communicator can do (NCCL refuses two ranks on one GPU), and this "
      "build has no gloo: install libgloo-dev and rebuild, or start one rank per GPU"));
}

}  // namespace tpserve
