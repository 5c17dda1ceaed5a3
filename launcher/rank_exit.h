// How one rank of a launched group ended, and what the group's outcome is.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tpserve {

struct RankExit {
  int rank = 0;
  pid_t pid = 0;
  int exit_code = -1;    // 0..255 when the rank exited, -1 when a signal ended it
  int signal = 0;        // the signal that ended it, 0 when it exited
  // The rank was still running when the group began to stop (a Stop() call, a
  // forwarded signal, or another rank's failure): how it ended was asked for.
  bool stopped = false;
  bool killed_after_grace = false;  // it outlived the grace period and got SIGKILL
  // Its status could not be read: the process ignores SIGCHLD (SIG_IGN), so the
  // kernel reaped the rank itself. Counts as a failure (exit_code -1, signal 0).
  bool status_lost = false;
  absl::Time when;                  // when it was reaped

  bool ok() const { return exit_code == 0; }
  // "rank 1 (pid 4242) exited with status 3" / "... was killed by signal 9 (SIGKILL)"
  // / "... ended with an unknown status (...)".
  std::string Describe() const;
  // The shell convention: the exit code, or 128 + signal.
  int ShellStatus() const { return signal != 0 ? 128 + signal : exit_code < 0 ? 1 : exit_code; }
};

// "SIGTERM" for 15 (the name when it is a common one, else "signal N").
std::string SignalName(int sig);

// The outcome of a finished group, given every rank's exit:
// * the first rank (by reap time) that failed on its own (non-zero status or a
//   signal, not after a stop was asked for) makes the group fail: the message names
//   it and says how many others were stopped and how many needed SIGKILL;
// * else, ranks that ignored SIGTERM and needed SIGKILL after the grace period
//   make it fail (DEADLINE_EXCEEDED naming them);
// * else OK: every rank exited 0, or ended because a stop was asked for.
absl::Status GroupOutcome(const std::vector<RankExit>& exits, absl::Duration grace);

// The failed rank GroupOutcome names, or nullptr when none failed on its own.
const RankExit* FirstFailure(const std::vector<RankExit>& exits);

}  // namespace tpserve
