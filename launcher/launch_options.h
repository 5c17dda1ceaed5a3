// What tpserve-launch (and tpserve-coordinator --spawn-workers) asks for when it
// starts the N local ranks of one node: the program, the torchrun-style
// rendezvous address, where the ranks' output goes, and how long a rank may take
// to stop after SIGTERM before it gets SIGKILL.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "launcher/rank_exit.h"

namespace tpserve {

enum class OutputMode {
  kInherit,   // the ranks write to the launcher's own stdout/stderr, unchanged
  kPrefix,    // each line a rank writes gets "[rank R] " in front, on the same stream
  kLogFiles,  // LOG_DIR/rank-R.stdout and LOG_DIR/rank-R.stderr (truncated at start)
};

struct LaunchOptions {
  // The program and its arguments: argv[0] is looked up on PATH when it has no '/'.
  std::vector<std::string> argv;
  int nproc_per_node = 1;              // N local ranks: LOCAL_RANK = 0..N-1
  // torchrun's static multi-node layout: this launcher is node `node_rank` of
  // `nnodes`, each starting nproc_per_node ranks, so a rank's
  // RANK = node_rank * nproc_per_node + LOCAL_RANK and WORLD_SIZE = nnodes * nproc_per_node.
  int nnodes = 1;                      // 1..4096
  int node_rank = 0;                   // 0..nnodes-1
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;             // torchrun's default; 1..65535
  // The data-parallel group the ranks join (TPSERVE_DP_RANK, read by
  // tpserve-worker); -1: none named (inherited as it is).
  int dp_rank = -1;
  OutputMode output = OutputMode::kPrefix;
  std::string log_dir;                 // kLogFiles only; created when missing
  // How long ranks get between SIGTERM and SIGKILL when the group is stopped
  // because one rank failed (Stop() and RequestStop() take their own).
  absl::Duration grace = absl::Seconds(10);
  // Extra variables for every rank, "NAME=value", applied after the rank variables.
  std::vector<std::string> extra_env;
  // Called from the group's monitor thread as each rank is reaped (no lock held).
  // Keep it short; it must not call Wait()/Stop() on the same group.
  std::function<void(const RankExit&)> on_exit;
};

}  // namespace tpserve
