// Starts comm_test_rank processes (one per rank) through launcher/'s process
// group and waits for them with a deadline, killing those still running when it
// passes, so a hang fails fast.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tpserve::comm_test {

std::string FreshTempDir(const std::string& tag);  // launcher/temp_dir.h; empty on failure

struct RankResult {
  int rank = 0;
  int exit_code = -1;     // -1 when killed by a signal or by the deadline
  bool timed_out = false;
};

// Runs `comm_test_rank --store store --rank r --world world <extra...>` for each
// r in ranks; returns one result per rank, in the order given.
std::vector<RankResult> RunRanks(const std::string& store, int world, const std::vector<int>& ranks,
                                 const std::vector<std::string>& extra,
                                 std::chrono::seconds deadline);

}  // namespace tpserve::comm_test
