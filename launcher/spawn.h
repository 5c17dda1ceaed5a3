// Starts one child with fork + execve (used by ProcessGroup; not a public API).
//
// The child, before exec: gets its own process group (so a signal to the group
// reaches whatever it starts), PR_SET_PDEATHSIG(SIGKILL) so it dies when the
// *thread* that spawned it ends (ProcessGroup spawns from its monitor thread,
// which lives as long as the group), every signal back to its default action
// with an empty mask (the launcher blocks the signals it forwards), stdin/out/err
// from the given fds, and every other inherited fd closed at exec.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

struct SpawnRequest {
  std::string program;            // a path (already looked up on PATH)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=value"
  int stdin_fd = 0;
  int stdout_fd = 1;
  int stderr_fd = 2;
};

// Returns once the child has exec'd the program; an exec failure (reported back
// through a close-on-exec pipe) is an error naming the program, and that child
// has then been reaped.
absl::StatusOr<pid_t> SpawnChild(const SpawnRequest& request);

}  // namespace tpserve
