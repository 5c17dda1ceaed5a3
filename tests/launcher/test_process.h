// Helpers for the launcher tests: temp folders, files the children write, and
// starting a process (tpserve-launch itself) with its output in files.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tpserve::launcher_test {

std::string MakeTempDir();  // a fresh folder under TMPDIR (or /tmp)
std::string ReadFile(const std::string& path);  // "" when missing
// Waits until every file exists (polling every 10 ms); false at the deadline.
bool WaitForFiles(const std::vector<std::string>& paths, absl::Duration timeout);
// "NAME=value" lines of a file written by `env` -> the value of NAME, if present.
std::optional<std::string> EnvValue(const std::string& env_dump, const std::string& name);

// posix_spawn of argv[0] (a path) with extra "NAME=value" entries added to our
// environment; stdout/stderr go to the given files.
pid_t StartProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                   const std::string& stdout_path, const std::string& stderr_path);
// The wait status, or nullopt after SIGKILLing it at the deadline.
std::optional<int> WaitProcess(pid_t pid, absl::Duration timeout);
// True when pid no longer runs (gone or a zombie nobody reaped yet), checked
// until the deadline.
bool WaitGone(pid_t pid, absl::Duration timeout);

}  // namespace tpserve::launcher_test
