// Which GPU a CUDA worker uses and how it talks to its peers (docs/architecture.md,
// "Processes": the CUDA device of a worker is its local rank).
//
//   device            = local_rank % visible devices
//   ranks_per_device  = local ranks that land on that device (1 on a node with
//                       a GPU per rank; more when there are fewer GPUs than
//                       ranks, e.g. tp = 2 on one GPU for tests)
//   communicator      = solo (world 1), NCCL (every rank on its own GPU), or
//                       gloo with device buffers staged through host memory
//                       (NCCL refuses two ranks on one GPU)
//
// Every rank decides from its own node's numbers, so the ranks agree when the
// nodes look alike (the design serves one node).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "comm/rank_env.h"

namespace tpserve {

enum class CommKind { kSolo, kNccl, kGloo };
std::string_view CommKindName(CommKind kind);  // "solo", "nccl", "gloo"

struct GpuPlacement {
  int device = 0;
  int ranks_per_device = 1;
  CommKind comm = CommKind::kSolo;
};

// FAILED_PRECONDITION when no device is visible, or when the ranks need a
// communicator this build lacks (names what to install or change).
absl::StatusOr<GpuPlacement> PlaceOnGpu(const RankEnv& env, int device_count, bool have_nccl,
                                        bool have_gloo);

}  // namespace tpserve
