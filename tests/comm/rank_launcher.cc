#include "rank_launcher.h"

#include <poll.h>

#include <cstdio>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "launcher/process_group.h"
#include "launcher/temp_dir.h"

namespace tpserve::comm_test {

std::string FreshTempDir(const std::string& tag) {
  absl::StatusOr<std::string> dir = MakeTempDir("tpserve-" + tag + "-");
  return dir.ok() ? *dir : "";
}

namespace {

// Starts one comm_test_rank as a group of its own: a test may start only some
// ranks of a world (the rank comes from --rank), and one rank's failure must
// not stop the others (each rank's outcome is checked).
std::optional<ProcessGroup> StartRank(const std::string& exe, const std::string& store, int world, int rank,
                                      const std::vector<std::string>& extra) {
  LaunchOptions launch;
  launch.argv = {exe, "--store", store, "--rank", std::to_string(rank), "--world", std::to_string(world)};
  launch.argv.insert(launch.argv.end(), extra.begin(), extra.end());
  launch.output = OutputMode::kInherit;
  absl::StatusOr<ProcessGroup> group = LaunchLocal(std::move(launch));
  if (!group.ok()) {
    std::fprintf(stderr, "rank %d could not start: %s\n", rank, group.status().ToString().c_str());
    return std::nullopt;
  }
  return *std::move(group);
}

// Waits for `group` until `end`; false when it is still running then.
bool WaitUntil(ProcessGroup& group, absl::Time end) {
  while (!group.done()) {
    const int64_t ms = absl::ToInt64Milliseconds(end - absl::Now());
    if (ms <= 0) return false;
    pollfd done = {group.done_fd(), POLLIN, 0};
    poll(&done, 1, static_cast<int>(ms));
  }
  return true;
}

}  // namespace

std::vector<RankResult> RunRanks(const std::string& store, int world, const std::vector<int>& ranks,
                                 const std::vector<std::string>& extra, std::chrono::seconds deadline) {
  const std::string exe = std::string(TPSERVE_BINARY_DIR) + "/tests/comm/comm_test_rank";
  std::vector<std::optional<ProcessGroup>> groups;
  for (int rank : ranks) groups.push_back(StartRank(exe, store, world, rank, extra));
  const absl::Time end = absl::Now() + absl::FromChrono(deadline);
  std::vector<RankResult> results(ranks.size());
  for (size_t k = 0; k < ranks.size(); ++k) {
    results[k].rank = ranks[k];
    if (!groups[k].has_value()) continue;  // exit_code stays -1
    if (!WaitUntil(*groups[k], end)) {
      results[k].timed_out = true;
      (void)groups[k]->Stop(absl::ZeroDuration());  // SIGKILL now
    }
    const std::vector<RankExit> exits = groups[k]->exits();
    if (!exits.empty()) results[k].exit_code = exits[0].exit_code;
  }
  return results;
}

}  // namespace tpserve::comm_test
