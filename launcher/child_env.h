// The environment of one launched rank: the launcher's own environment, less
// any rank variables of an outer launcher (mpirun, PMI, torchrun), plus the
// torchrun variables that comm/rank_env.h reads.
//
// Set for local rank l of N (nproc_per_node) on node g of G (node_rank of nnodes),
// as torchrun sets them (one role, "default"; torchrun sets no NODE_RANK):
//   RANK=g*N+l LOCAL_RANK=l WORLD_SIZE=G*N LOCAL_WORLD_SIZE=N GROUP_RANK=g GROUP_WORLD_SIZE=G
//   ROLE_RANK=g*N+l ROLE_WORLD_SIZE=G*N ROLE_NAME=default MASTER_ADDR MASTER_PORT
//   TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_RUN_ID=none
//   TPSERVE_LAUNCHER=1
// Removed, the one list of an outer launcher's variables (every launcher of
// local ranks goes through here): OMPI_*, PMI_*, PMIX_*, MPI_LOCALRANKID,
// MPI_LOCALNRANKS, and the torchrun variables above and TORCHELASTIC_* (set
// afresh). comm/rank_env.h reads the MPI and PMI ones before the torchrun ones,
// so a launcher that itself runs under mpirun would otherwise hand every child
// the launcher's rank.
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_options.h"

namespace tpserve {

// parent_env: "NAME=value" entries (e.g. from environ). Later entries of the
// result override nothing: each name appears once. extra_env comes last and wins.
std::vector<std::string> RankEnvironment(const LaunchOptions& options, int local_rank,
                                         const std::vector<std::string>& parent_env);

// The process's own environment as "NAME=value" entries.
std::vector<std::string> CurrentEnvironment();

}  // namespace tpserve
