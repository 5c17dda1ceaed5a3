// Starting the ranks of tpserve-generate as local processes (torchrun style):
// the launcher re-executes its own binary once per rank with RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE set, waits for all of them and stops the rest
// as soon as one fails.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve::engine_cli {

// Runs `world_size` copies of this executable (/proc/self/exe) with `args`
// (argv[1..]) and the rank variables in their environment; Open MPI, PMI and
// torchrun variables inherited from this process are removed first. Returns OK
// when every rank exits 0; otherwise an error naming the first rank that failed
// and how (exit code or signal), after terminating the others.
absl::Status RunLocalRanks(int world_size, const std::vector<std::string>& args);

// A fresh private directory under $TMPDIR (or /tmp) for the ranks' FileStore,
// and its recursive removal.
absl::StatusOr<std::string> MakeTempDir(const std::string& prefix);
void RemoveTempDir(const std::string& dir);

}  // namespace tpserve::engine_cli
