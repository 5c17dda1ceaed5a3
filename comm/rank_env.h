// Where this process sits among the workers: its rank, the world size and its
// local rank (= its CUDA device), read from the launcher's environment.
//
// Sources, first match wins:
//   1. explicit overrides (command-line flags), field by field, over 2..4;
//   2. Open MPI (mpirun):  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                          OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE;
//   3. MPICH / PMI:        PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS;
//   4. torchrun / tpserve-launch: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//                          (+ MASTER_ADDR, MASTER_PORT, read whatever the source);
//   5. nothing set: a single process (rank 0 of 1).
// The data-parallel group it joins: the override, else TPSERVE_DP_RANK
// (tpserve-launch --dp-rank sets it), else none (the port it dials decides).
// A launcher that sets the rank but not the world size (or the reverse), a
// value that is not a non-negative integer, rank >= world size, or
// local rank >= local world size is INVALID_ARGUMENT naming the variable.
// When the launcher gives no local rank, the rank is used (one node).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace tpserve {

// The variable naming a worker's data-parallel group (tpserve-launch --dp-rank G).
inline constexpr char kDpRankEnv[] = "TPSERVE_DP_RANK";

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // 0 = not given by the launcher
  std::string master_addr;   // MASTER_ADDR, empty when unset
  int master_port = 0;       // MASTER_PORT, 0 when unset
  std::optional<int> dp_rank;  // the data-parallel group named, if any
  // "openmpi", "pmi", "torchrun" or "default" (nothing set), with "+override"
  // appended when an override replaced a value.
  std::string source;
  // Ranks on this host: local_world_size, or every rank when the launcher gave none.
  int local_ranks() const { return local_world_size > 0 ? local_world_size : world_size; }
};

struct RankOverrides {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<int> dp_rank;
};

// Reads the process environment (getenv).
absl::StatusOr<RankEnv> ReadRankEnv(const RankOverrides& overrides = {});

}  // namespace tpserve
