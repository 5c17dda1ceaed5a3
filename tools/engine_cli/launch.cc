#include "tools/engine_cli/launch.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace tpserve::engine_cli {
namespace {

// Variables a launcher sets to say where a process sits: a child must only see ours.
bool IsLauncherVariable(absl::string_view entry) {
  for (absl::string_view prefix : {"OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "RANK=", "WORLD_SIZE=",
                                  "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "GROUP_RANK="}) {
    if (absl::StartsWith(entry, prefix)) return true;
  }
  return false;
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return "stopped";
}

}  // namespace

absl::Status RunLocalRanks(int world_size, const std::vector<std::string>& args) {
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!IsLauncherVariable(*e)) base_env.emplace_back(*e);
  }
  std::vector<pid_t> pids;
  absl::Status failure;
  for (int rank = 0; rank < world_size && failure.ok(); ++rank) {
    std::vector<std::string> env = base_env;
    env.push_back(absl::StrCat("RANK=", rank));
    env.push_back(absl::StrCat("WORLD_SIZE=", world_size));
    env.push_back(absl::StrCat("LOCAL_RANK=", rank));
    env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", world_size));
    std::vector<char*> envp, argv;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string argv0 = exe;
    std::vector<std::string> args_copy = args;
    argv.push_back(argv0.data());
    for (std::string& a : args_copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) {
      failure = absl::InternalError(
          absl::StrCat("could not start rank ", rank, " (", exe, "): ", std::strerror(rc)));
    } else {
      pids.push_back(pid);
    }
  }
  // Wait for every rank; after the first failure, stop the others we started.
  size_t alive = pids.size();
  if (!failure.ok()) {
    for (pid_t p : pids) kill(p, SIGTERM);
  }
  while (alive > 0) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      break;
    }
    size_t rank = 0;
    while (rank < pids.size() && pids[rank] != done) ++rank;
    if (rank == pids.size()) continue;  // not one of ours
    pids[rank] = -1;
    --alive;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && failure.ok()) {
      failure = absl::InternalError(absl::StrCat("rank ", rank, " of ", world_size, " ",
                                                 Describe(status), "; its error is above"));
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGTERM);
      }
    }
  }
  return failure;
}

absl::StatusOr<std::string> MakeTempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/", prefix, "XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("could not create a temporary directory ", templ, ": ",
                                            std::strerror(errno), "; set TMPDIR to a writable folder"));
  }
  return templ;
}

void RemoveTempDir(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace tpserve::engine_cli
