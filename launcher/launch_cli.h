// The command line of tpserve-launch (torchrun-style; one launcher per node,
// --nnodes/--node-rank place this node's ranks in the whole job):
//
//   tpserve-launch --nproc-per-node N [--nnodes 1 --node-rank 0]
//                  [--master-addr 127.0.0.1] [--master-port 29500] [--dp-rank G]
//                  [--log-dir DIR] [--no-prefix] [--grace-seconds 10] -- PROGRAM ARGS...
//
// Flags take "--flag VALUE" or "--flag=VALUE", with '-' or '_' between words
// (torchrun accepts both). The program starts after "--", or at the first
// argument that is not a flag. Without --log-dir each line a rank writes is
// prefixed "[rank R] " (--no-prefix: passed through unchanged).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/launch_options.h"

namespace tpserve {

struct LaunchCommand {
  LaunchOptions options;
  bool help = false;  // --help / -h: print LaunchUsage() and exit 0
};

// args: the command line without argv[0]. INVALID_ARGUMENT names the flag.
absl::StatusOr<LaunchCommand> ParseLaunchArgs(const std::vector<std::string>& args);

std::string LaunchUsage();

}  // namespace tpserve
