// The N local ranks of one node as one unit: LaunchLocal() starts them with the
// torchrun environment (child_env.h), and the group watches them from its own
// monitor thread (pidfds + poll, no busy waiting, no signal handlers installed):
//
// * when one rank fails (non-zero exit or a signal) the others get SIGTERM, and
//   SIGKILL once options.grace has passed; Wait() then names the failed rank;
// * Signal() forwards a signal to every running rank's process group;
// * RequestStop()/Stop() end the group: a signal (SIGTERM), then SIGKILL after
//   the grace period;
// * no orphan outlives the launcher: each rank is in its own process group
//   (signals reach what it starts) and has PR_SET_PDEATHSIG(SIGKILL) tied to the
//   monitor thread; destroying a running group stops it.
//
// Used by tpserve-launch and by tpserve-coordinator --spawn-workers. A process
// using it should ignore SIGPIPE (gRPC does) when output is prefixed, so a
// closed stdout does not kill it.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/launch_options.h"
#include "launcher/rank_exit.h"

namespace tpserve {

class ProcessGroup {
 public:
  struct State;  // the monitor thread's state (process_group.cc)

  ProcessGroup(ProcessGroup&&) noexcept;
  ProcessGroup& operator=(ProcessGroup&&) noexcept;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  // A group still running is stopped (RequestStop(options.grace)) and waited for.
  ~ProcessGroup();

  int size() const;
  std::vector<pid_t> pids() const;  // [size], by rank

  // Sends sig to the process group of every rank not yet reaped.
  void Signal(int sig);
  // Begins stopping without blocking: sig to every running rank now, SIGKILL to
  // those still running after grace. A later call may only shorten the deadline
  // (grace 0 = SIGKILL now). Ranks that end from here on count as stopped.
  void RequestStop(absl::Duration grace, int sig = SIGTERM);
  // RequestStop(grace) then Wait().
  absl::Status Stop(absl::Duration grace);

  // Blocks until every rank has been reaped; the outcome is GroupOutcome()
  // (rank_exit.h): OK when all exited 0 or ended because a stop was asked for,
  // ABORTED naming the first rank that failed on its own, DEADLINE_EXCEEDED
  // naming ranks that needed SIGKILL.
  absl::Status Wait();
  bool done() const;
  // Readable (never read from it) once every rank is reaped: poll it together
  // with your own fds (tpserve-launch polls it with a signalfd).
  int done_fd() const;
  // The ranks reaped so far, in rank order once done().
  std::vector<RankExit> exits() const;

 private:
  friend absl::StatusOr<ProcessGroup> LaunchLocal(LaunchOptions options);
  explicit ProcessGroup(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Starts options.nproc_per_node ranks of options.argv. Errors, before or while
// starting (a rank that started is then killed and reaped): INVALID_ARGUMENT for
// bad options (naming the field), NOT_FOUND / PERMISSION_DENIED when the program
// cannot be run (FindProgram; tpserve-launch exits 127 / 126), and the reason a
// log file or pipe could not be made.
absl::StatusOr<ProcessGroup> LaunchLocal(LaunchOptions options);

}  // namespace tpserve
