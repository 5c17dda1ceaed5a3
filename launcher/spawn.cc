#include "launcher/spawn.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the forked child: async-signal-safe calls only, never returns.
[[noreturn]] void ExecChild(const SpawnRequest& req, char* const* argv, char* const* envp, pid_t parent,
                            int report_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(128 + SIGKILL);  // the spawning thread's process is already gone
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // KILL/STOP just fail
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const int fds[3] = {req.stdin_fd, req.stdout_fd, req.stderr_fd};
  for (int i = 0; i < 3; ++i) {
    if (fds[i] != i && dup2(fds[i], i) < 0) {
      const int err = errno;
      (void)!write(report_fd, &err, sizeof err);
      _exit(126);
    }
  }
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);  // best effort (Linux >= 5.11)
  execve(req.program.c_str(), argv, envp);
  const int err = errno;
  (void)!write(report_fd, &err, sizeof err);
  _exit(err == ENOENT ? 127 : 126);
}

}  // namespace

absl::StatusOr<pid_t> SpawnChild(const SpawnRequest& request) {
  std::vector<char*> argv = CStrings(request.argv);
  std::vector<char*> envp = CStrings(request.env);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("pipe2 failed: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(report[0]);
    close(report[1]);
    return absl::ResourceExhaustedError(
        absl::StrCat("fork failed: ", std::strerror(err), " (too many processes, or out of memory?)"));
  }
  if (pid == 0) ExecChild(request, argv.data(), envp.data(), parent, report[1]);
  close(report[1]);
  setpgid(pid, pid);  // also here, so the group exists before we can signal it (EACCES after exec is fine)
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n <= 0) return pid;  // EOF: exec succeeded and closed the pipe
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  const std::string msg = absl::StrCat("cannot run '", request.program, "': ", std::strerror(child_errno));
  if (child_errno == ENOENT) return absl::NotFoundError(msg);
  if (child_errno == EACCES) return absl::PermissionDeniedError(msg);
  return absl::FailedPreconditionError(msg);
}

}  // namespace tpserve
