#include "launcher/process_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "launcher/child_env.h"
#include "launcher/find_program.h"
#include "launcher/rank_output.h"
#include "launcher/spawn.h"

namespace tpserve {
namespace {

absl::Status ErrnoError(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

struct ProcessGroup::State {
  LaunchOptions options;
  std::string program;

  mutable absl::Mutex mu;
  bool started = false;                     // the monitor finished spawning (well or not)
  absl::Status start_status;
  std::vector<pid_t> pids;                  // [N]
  std::vector<int> pidfds;                  // [N], -1 once reaped
  std::vector<std::optional<RankExit>> exits;  // [N]
  int running = 0;
  bool stopping = false;
  absl::Duration stop_grace = absl::ZeroDuration();
  absl::Time kill_deadline = absl::InfiniteFuture();
  std::vector<bool> killed;                 // [N] got SIGKILL at the deadline
  bool finished = false;
  absl::Status outcome;

  std::vector<PrefixedStream> streams;      // monitor thread only
  int wake_r = -1, wake_w = -1;             // RequestStop() wakes the monitor
  int done_r = -1, done_w = -1;             // readable once finished
  std::thread monitor;

  void Wake() const {
    const char c = 0;
    (void)!write(wake_w, &c, 1);
  }
  // Requires mu. Signals every rank not yet reaped (its whole process group).
  void SignalRunning(int sig) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (!exits[r] && pids[r] > 0) kill(-pids[r], sig);
    }
  }
  // Requires mu.
  void BeginStop(absl::Duration grace, int sig) {
    const absl::Time deadline = absl::Now() + std::max(grace, absl::ZeroDuration());
    if (!stopping) {
      stopping = true;
      stop_grace = grace;
      SignalRunning(sig);
    }
    if (deadline < kill_deadline) kill_deadline = deadline;
  }
  // Requires mu. Reaps rank r if it has exited; returns its exit when it did.
  std::optional<RankExit> TryReap(int r) {
    int status = 0;
    const pid_t got = waitpid(pids[r], &status, WNOHANG);
    // ECHILD: SIGCHLD is SIG_IGN in this process, so the kernel reaped the rank
    // and its status is lost (RankExit says so); anything else: still running.
    const bool status_lost = got < 0 && errno == ECHILD;
    if (got != pids[r] && !status_lost) return std::nullopt;
    RankExit e;
    e.rank = r;
    e.pid = pids[r];
    e.status_lost = status_lost;
    if (status_lost) e.exit_code = -1;
    else if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    else e.exit_code = WEXITSTATUS(status);
    e.stopped = stopping;
    e.killed_after_grace = killed[r];
    e.when = absl::Now();
    exits[r] = e;
    CloseFd(pidfds[r]);
    --running;
    return e;
  }

  absl::Status SpawnAll();
  void Run();
  // Run's steps, on the monitor thread.
  // Requires mu. After a failed start: kills and reaps whatever started.
  void AbortStart(const absl::Status& st);
  // fds = the wake pipe, the pidfds, then the output streams, and the poll
  // timeout (kept when there is no deadline); false when no rank runs.
  bool CollectPollFds(std::vector<pollfd>& fds, int& timeout_ms);
  // Empties the wake pipe after RequestStop() wrote to it.
  void DrainWake() const;
  // Reaps the ranks that ended and SIGKILLs the rest once kill_deadline has passed.
  std::vector<RankExit> ReapEnded();
  // A rank of `reaped` failed on its own: SIGTERM to the others (then SIGKILL after the grace).
  void StopOthersIfOneFailed(const std::vector<RankExit>& reaped);
  // After the last rank: drains the output, sets the outcome and signals done_fd.
  void Finish();
};

absl::Status ProcessGroup::State::SpawnAll() {
  const std::vector<std::string> parent_env = CurrentEnvironment();
  const int n = options.nproc_per_node;
  pids.assign(n, 0);
  pidfds.assign(n, -1);
  exits.assign(n, std::nullopt);
  killed.assign(n, false);
  for (int r = 0; r < n; ++r) {
    SpawnRequest req{program, options.argv, RankEnvironment(options, r, parent_env)};
    ChildStdio stdio;
    if (absl::Status st = OpenRankStdio(options, r, stdio, streams); !st.ok()) return st;
    req.stdin_fd = stdio.in;
    if (stdio.out >= 0) req.stdout_fd = stdio.out;
    if (stdio.err >= 0) req.stderr_fd = stdio.err;
    absl::StatusOr<pid_t> pid = SpawnChild(req);
    if (!pid.ok()) return pid.status();
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, *pid, 0));  // glibc 2.36's C++ header lacks it
    absl::MutexLock lock(&mu);
    pids[r] = *pid;
    ++running;
    // ESRCH: the rank already ended and was reaped by the kernel (SIGCHLD is
    // SIG_IGN); it stays without a pidfd and Run() reaps it at once (status lost).
    if (pidfd < 0 && errno != ESRCH) {
      absl::Status st = ErrnoError("pidfd_open failed (the launcher needs Linux >= 5.3)");
      return st;
    }
    pidfds[r] = pidfd;
  }
  return absl::OkStatus();
}

void ProcessGroup::State::Run() {
  absl::Status st = SpawnAll();
  {
    absl::MutexLock lock(&mu);
    started = true;
    start_status = st;
    if (!st.ok()) {  // kill and reap whatever started
      AbortStart(st);
      return;
    }
  }
  std::vector<pollfd> fds;
  for (;;) {
    int timeout_ms = -1;
    if (!CollectPollFds(fds, timeout_ms)) break;
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) DrainWake();
    PumpStreams(streams, fds, /*drain=*/false);
    const std::vector<RankExit> reaped = ReapEnded();
    // Whoever watches hears of a failed rank before the others are stopped
    // because of it, so it is not told first of a peer's stop.
    if (options.on_exit) {
      for (const RankExit& e : reaped) options.on_exit(e);
    }
    StopOthersIfOneFailed(reaped);
  }
  Finish();
}

void ProcessGroup::State::AbortStart(const absl::Status& st) {
  SignalRunning(SIGKILL);
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] > 0) waitpid(pids[r], nullptr, 0);
    CloseFd(pidfds[r]);
  }
  for (PrefixedStream& s : streams) CloseFd(s.fd);
  finished = true;
  outcome = st;
}

bool ProcessGroup::State::CollectPollFds(std::vector<pollfd>& fds, int& timeout_ms) {
  fds.clear();
  fds.push_back({wake_r, POLLIN, 0});
  {
    absl::MutexLock lock(&mu);
    if (running == 0) return false;
    bool reap_now = false;  // a rank without a pidfd is already gone: do not wait
    for (size_t r = 0; r < pids.size(); ++r) {
      if (pidfds[r] >= 0) fds.push_back({pidfds[r], POLLIN, 0});
      else if (!exits[r]) reap_now = true;
    }
    if (reap_now) {
      timeout_ms = 0;
    } else if (kill_deadline != absl::InfiniteFuture()) {
      const absl::Duration left = std::max(kill_deadline - absl::Now(), absl::ZeroDuration());
      timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(left + absl::Milliseconds(1)));
    }
  }
  for (const PrefixedStream& s : streams) {
    if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0});
  }
  return true;
}

void ProcessGroup::State::DrainWake() const {
  char drain[64];
  while (read(wake_r, drain, sizeof drain) > 0) {
  }
}

void ProcessGroup::State::StopOthersIfOneFailed(const std::vector<RankExit>& reaped) {
  absl::MutexLock lock(&mu);
  for (const RankExit& e : reaped) {
    if (!e.ok() && !stopping) BeginStop(options.grace, SIGTERM);
  }
}

std::vector<RankExit> ProcessGroup::State::ReapEnded() {
  std::vector<RankExit> reaped;
  absl::MutexLock lock(&mu);
  for (size_t r = 0; r < pids.size(); ++r) {
    if (exits[r]) continue;
    if (std::optional<RankExit> e = TryReap(static_cast<int>(r))) reaped.push_back(*e);
  }
  if (running > 0 && absl::Now() >= kill_deadline) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (!exits[r]) killed[r] = true;
    }
    SignalRunning(SIGKILL);
    kill_deadline = absl::InfiniteFuture();
  }
  return reaped;
}

void ProcessGroup::State::Finish() {
  PumpStreams(streams, {}, /*drain=*/true);  // what the ranks wrote just before they ended
  for (PrefixedStream& s : streams) CloseFd(s.fd);
  absl::MutexLock lock(&mu);
  std::vector<RankExit> all;
  for (const std::optional<RankExit>& e : exits) {
    if (e) all.push_back(*e);
  }
  if (stopping) {
    for (pid_t pid : pids) kill(-pid, SIGKILL);  // what the ranks started and left behind
  }
  outcome = GroupOutcome(all, stopping ? stop_grace : options.grace);
  finished = true;
  const char c = 0;
  (void)!write(done_w, &c, 1);
}

ProcessGroup::ProcessGroup(std::unique_ptr<State> state) : state_(std::move(state)) {}
ProcessGroup::ProcessGroup(ProcessGroup&&) noexcept = default;

ProcessGroup& ProcessGroup::operator=(ProcessGroup&& other) noexcept {
  if (this != &other) {
    ProcessGroup doomed(std::move(*this));  // stops and joins the group we held
    state_ = std::move(other.state_);
  }
  return *this;
}

ProcessGroup::~ProcessGroup() {
  if (!state_) return;
  if (!done()) RequestStop(state_->options.grace);
  if (state_->monitor.joinable()) state_->monitor.join();
  for (int* fd : {&state_->wake_r, &state_->wake_w, &state_->done_r, &state_->done_w}) CloseFd(*fd);
}

int ProcessGroup::size() const { return state_->options.nproc_per_node; }

std::vector<pid_t> ProcessGroup::pids() const {
  absl::MutexLock lock(&state_->mu);
  return state_->pids;
}

void ProcessGroup::Signal(int sig) {
  absl::MutexLock lock(&state_->mu);
  state_->SignalRunning(sig);
}

void ProcessGroup::RequestStop(absl::Duration grace, int sig) {
  absl::MutexLock lock(&state_->mu);
  if (state_->finished) return;
  state_->BeginStop(grace, sig);
  state_->Wake();
}

absl::Status ProcessGroup::Stop(absl::Duration grace) {
  RequestStop(grace);
  return Wait();
}

absl::Status ProcessGroup::Wait() {
  state_->mu.LockWhen(absl::Condition(&state_->finished));
  absl::Status outcome = state_->outcome;
  state_->mu.Unlock();
  return outcome;
}

bool ProcessGroup::done() const {
  absl::MutexLock lock(&state_->mu);
  return state_->finished;
}

int ProcessGroup::done_fd() const { return state_->done_r; }

std::vector<RankExit> ProcessGroup::exits() const {
  absl::MutexLock lock(&state_->mu);
  std::vector<RankExit> out;
  for (const std::optional<RankExit>& e : state_->exits) {
    if (e) out.push_back(*e);
  }
  return out;
}

absl::StatusOr<ProcessGroup> LaunchLocal(LaunchOptions options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("LaunchOptions.argv is empty: give the program to run");
  if (options.nproc_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("nproc_per_node must be >= 1 (got ", options.nproc_per_node, ")"));
  }
  if (options.nnodes < 1 || options.node_rank < 0 || options.node_rank >= options.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("node_rank must be in 0..nnodes-1 and nnodes >= 1 (got node_rank ",
                                                   options.node_rank, " of nnodes ", options.nnodes, ")"));
  }
  if (options.master_port < 1 || options.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("master_port must be in 1..65535 (got ", options.master_port, ")"));
  }
  if (options.grace < absl::ZeroDuration()) return absl::InvalidArgumentError("grace must not be negative");
  if (options.output == OutputMode::kLogFiles) {
    if (options.log_dir.empty()) return absl::InvalidArgumentError("log files asked for but log_dir is empty");
    std::error_code ec;
    std::filesystem::create_directories(options.log_dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create log folder ", options.log_dir, ": ", ec.message()));
    }
  }
  const char* path = getenv("PATH");
  absl::StatusOr<std::string> program = FindProgram(options.argv[0], path != nullptr ? path : "/usr/bin:/bin");
  if (!program.ok()) return program.status();

  auto state = std::make_unique<ProcessGroup::State>();
  state->options = std::move(options);
  state->program = *std::move(program);
  int wake[2], done[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("pipe2 failed");
  if (pipe2(done, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(wake[0]);
    close(wake[1]);
    return ErrnoError("pipe2 failed");
  }
  state->wake_r = wake[0];
  state->wake_w = wake[1];
  state->done_r = done[0];
  state->done_w = done[1];
  ProcessGroup::State* s = state.get();
  s->monitor = std::thread([s] { s->Run(); });
  s->mu.LockWhen(absl::Condition(&s->started));
  absl::Status start = s->start_status;
  s->mu.Unlock();
  ProcessGroup group(std::move(state));
  if (!start.ok()) return start;  // group's destructor joins the monitor
  return group;
}

}  // namespace tpserve
