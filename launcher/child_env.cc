#include "launcher/child_env.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/rank_env.h"

extern char** environ;

namespace tpserve {
namespace {

// Variables by which an outer launcher places a process in its job: Open MPI
// (every OMPI_ variable, not only OMPI_COMM_WORLD_*), PMI and PMIx (PMI_RANK,
// PMIX_RANK, PMI_FD, ...), MPICH/Hydra's local rank, and torchrun's (set
// afresh below). A launched rank belongs to our group, not to that job.
bool IsOuterLaunchVariable(const std::string& name) {
  for (const char* prefix : {"OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  for (const char* exact : {"MPI_LOCALRANKID", "MPI_LOCALNRANKS", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                            "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
                            "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TPSERVE_LAUNCHER"}) {
    if (name == exact) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> RankEnvironment(const LaunchOptions& options, int local_rank,
                                         const std::vector<std::string>& parent_env) {
  // name -> value, keeping first-seen order for the inherited part.
  std::vector<std::string> order;
  std::map<std::string, std::string> values;
  auto set = [&](const std::string& entry) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) return;  // not NAME=value: drop it
    std::string name = entry.substr(0, eq);
    if (values.find(name) == values.end()) order.push_back(name);
    values[name] = entry.substr(eq + 1);
  };
  for (const std::string& entry : parent_env) {
    const size_t eq = entry.find('=');
    if (eq != std::string::npos && IsOuterLaunchVariable(entry.substr(0, eq))) continue;
    set(entry);
  }
  const int n = options.nproc_per_node;
  const std::string rank = absl::StrCat(options.node_rank * n + local_rank);
  const std::string world = absl::StrCat(options.nnodes * n);
  for (const std::string& entry : {
           absl::StrCat("RANK=", rank), absl::StrCat("LOCAL_RANK=", local_rank), absl::StrCat("WORLD_SIZE=", world),
           absl::StrCat("LOCAL_WORLD_SIZE=", n), absl::StrCat("GROUP_RANK=", options.node_rank),
           absl::StrCat("GROUP_WORLD_SIZE=", options.nnodes), absl::StrCat("ROLE_RANK=", rank),
           absl::StrCat("ROLE_WORLD_SIZE=", world), std::string("ROLE_NAME=default"),
           absl::StrCat("MASTER_ADDR=", options.master_addr), absl::StrCat("MASTER_PORT=", options.master_port),
           std::string("TORCHELASTIC_RESTART_COUNT=0"), std::string("TORCHELASTIC_MAX_RESTARTS=0"),
           std::string("TORCHELASTIC_RUN_ID=none"), std::string("TPSERVE_LAUNCHER=1")}) {
    set(entry);
  }
  if (options.dp_rank >= 0) set(absl::StrCat(kDpRankEnv, "=", options.dp_rank));
  for (const std::string& entry : options.extra_env) set(entry);
  std::vector<std::string> env;
  env.reserve(order.size());
  for (const std::string& name : order) env.push_back(absl::StrCat(name, "=", values[name]));
  return env;
}

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace tpserve
