#include "launcher/rank_exit.h"

#include <csignal>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {

std::string SignalName(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return absl::StrCat("signal ", sig);
  }
}

std::string RankExit::Describe() const {
  std::string who = absl::StrCat("rank ", rank, " (pid ", pid, ")");
  if (status_lost) {
    return absl::StrCat(who, " ended with an unknown status (SIGCHLD is ignored in this process, so the kernel "
                             "reaped it: do not set SIGCHLD to SIG_IGN when launching ranks)");
  }
  if (signal != 0) return absl::StrCat(who, " was killed by signal ", signal, " (", SignalName(signal), ")");
  return absl::StrCat(who, " exited with status ", exit_code);
}

const RankExit* FirstFailure(const std::vector<RankExit>& exits) {
  const RankExit* first = nullptr;
  for (const RankExit& e : exits) {
    if (e.ok() || e.stopped) continue;
    if (first == nullptr || e.when < first->when) first = &e;
  }
  return first;
}

absl::Status GroupOutcome(const std::vector<RankExit>& exits, absl::Duration grace) {
  std::vector<int> killed;
  int stopped = 0;
  for (const RankExit& e : exits) {
    if (e.stopped) ++stopped;
    if (e.killed_after_grace) killed.push_back(e.rank);
  }
  const std::string killed_ranks = absl::StrJoin(killed, ", ");
  if (const RankExit* f = FirstFailure(exits)) {
    std::string msg = f->Describe();
    if (stopped > 0) {
      absl::StrAppend(&msg, "; stopped the other ", stopped, stopped == 1 ? " rank" : " ranks");
      if (!killed.empty()) {
        absl::StrAppend(&msg, " (rank ", killed_ranks, " ignored SIGTERM for ", absl::FormatDuration(grace),
                        " and got SIGKILL)");
      }
    }
    absl::StrAppend(&msg, ". Its own output (above, or its log file) says why.");
    return absl::AbortedError(msg);
  }
  if (!killed.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", killed_ranks, " did not exit within ", absl::FormatDuration(grace),
        " of SIGTERM and got SIGKILL; give it a longer grace period or make it handle SIGTERM"));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
