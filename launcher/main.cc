// tpserve-launch: starts N local ranks of a program with the torchrun
// environment, forwards signals to them, and stops them all when one fails.
// See launch_cli.h for the flags and process_group.h for the behaviour.
//
// Exit status: 0 when every rank exited 0; the failed rank's status (its exit
// code, or 128 + signal) when one failed; 128 + S after a forwarded signal S
// unless every rank then exited 0; 127 / 126 when the program cannot be run;
// 2 for a bad command line.
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "launcher/find_program.h"
#include "launcher/launch_cli.h"
#include "launcher/process_group.h"

namespace {

int Fail(const std::string& msg, int status) {
  std::cerr << "tpserve-launch: " << msg << "\n";
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<tpserve::LaunchCommand> cmd = tpserve::ParseLaunchArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!cmd.ok()) return Fail(absl::StrCat(cmd.status().message(), "\n", tpserve::LaunchUsage()), 2);
  if (cmd->help) {
    std::cout << tpserve::LaunchUsage();
    return 0;
  }
  // The forwarded signals are read from a signalfd; block them before any thread
  // starts so none is delivered elsewhere (the ranks get an empty mask back).
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&forwarded, sig);
  pthread_sigmask(SIG_BLOCK, &forwarded, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher and orphan-stop the ranks
  const int sfd = signalfd(-1, &forwarded, SFD_CLOEXEC);
  if (sfd < 0) return Fail(absl::StrCat("signalfd failed: ", std::strerror(errno)), 1);

  const absl::Duration grace = cmd->options.grace;
  absl::StatusOr<tpserve::ProcessGroup> group = tpserve::LaunchLocal(std::move(cmd->options));
  if (!group.ok()) {
    const absl::StatusCode code = group.status().code();
    if (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kPermissionDenied) {
      return Fail(std::string(group.status().message()), tpserve::ExecFailureStatus(group.status()));
    }
    return Fail(std::string(group.status().message()), code == absl::StatusCode::kInvalidArgument ? 2 : 1);
  }

  int got_signal = 0;
  for (;;) {
    pollfd fds[2] = {{sfd, POLLIN, 0}, {group->done_fd(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      group->RequestStop(absl::ZeroDuration(), SIGKILL);
      return Fail(absl::StrCat("poll failed: ", std::strerror(errno), "; killed the ranks"), 1);
    }
    if (fds[1].revents != 0) break;
    if (fds[0].revents == 0) continue;
    signalfd_siginfo info{};
    if (read(sfd, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) continue;
    const int sig = static_cast<int>(info.ssi_signo);
    if (got_signal == 0) {
      got_signal = sig;
      std::cerr << "tpserve-launch: got " << tpserve::SignalName(sig) << ", forwarding it to " << group->size()
                << " ranks (SIGKILL to any still running after " << absl::FormatDuration(grace) << ")\n";
      group->RequestStop(grace, sig);
    } else {
      std::cerr << "tpserve-launch: got " << tpserve::SignalName(sig) << " again, killing the ranks now\n";
      group->RequestStop(absl::ZeroDuration(), SIGKILL);
    }
  }
  const absl::Status outcome = group->Wait();
  const std::vector<tpserve::RankExit> exits = group->exits();
  if (got_signal != 0) {
    bool all_zero = true;
    for (const tpserve::RankExit& e : exits) all_zero = all_zero && e.ok();
    if (!outcome.ok()) std::cerr << "tpserve-launch: " << outcome.message() << "\n";
    if (all_zero) return 0;
    std::cerr << "tpserve-launch: stopped by " << tpserve::SignalName(got_signal) << "\n";
    return 128 + got_signal;
  }
  if (outcome.ok()) return 0;
  std::cerr << "tpserve-launch: " << outcome.message() << "\n";
  const tpserve::RankExit* failed = tpserve::FirstFailure(exits);
  if (failed == nullptr) return 1;
  const int status = failed->ShellStatus();
  return status == 0 ? 1 : status;
}
