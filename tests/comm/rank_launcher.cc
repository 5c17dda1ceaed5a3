#include "rank_launcher.h"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

extern char** environ;

namespace tpserve::comm_test {

std::string FreshTempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("tpserve-" + tag + "-XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

std::vector<RankResult> RunRanks(const std::string& store, int world, const std::vector<int>& ranks,
                                 const std::vector<std::string>& extra,
                                 std::chrono::seconds deadline) {
  const std::string exe = std::string(TPSERVE_BINARY_DIR) + "/tests/comm/comm_test_rank";
  std::vector<RankResult> results(ranks.size());
  std::vector<pid_t> pids(ranks.size(), -1);
  for (size_t k = 0; k < ranks.size(); ++k) {
    results[k].rank = ranks[k];
    std::vector<std::string> args = {exe,      "--store", store, "--rank", std::to_string(ranks[k]),
                                     "--world", std::to_string(world)};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pids[k], exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0) pids[k] = -1;
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  size_t left = ranks.size();
  for (pid_t p : pids) left -= p < 0 ? 1 : 0;
  while (left > 0) {
    for (size_t k = 0; k < pids.size(); ++k) {
      if (pids[k] < 0) continue;
      int status = 0;
      if (waitpid(pids[k], &status, WNOHANG) == pids[k]) {
        results[k].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        pids[k] = -1;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > end) {
      for (size_t k = 0; k < pids.size(); ++k) {
        if (pids[k] < 0) continue;
        kill(pids[k], SIGKILL);
        waitpid(pids[k], nullptr, 0);
        results[k].timed_out = true;
        pids[k] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return results;
}

}  // namespace tpserve::comm_test
