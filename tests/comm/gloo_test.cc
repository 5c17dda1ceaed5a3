// The gloo communicator with real processes (one comm_test_rank per rank), each
// world with a fresh FileStore directory.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "comm/gloo_communicator.h"
#include "rank_launcher.h"
#include "tests/testing/seed.h"

namespace tpserve::comm_test {
namespace {

using std::chrono::milliseconds;

void ExpectAllPassed(const std::vector<RankResult>& results) {
  for (const RankResult& r : results) {
    EXPECT_FALSE(r.timed_out) << "rank " << r.rank << " hung and was killed";
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " failed (its stderr is above)";
  }
}

std::vector<int> AllRanks(int world) {
  std::vector<int> ranks(world);
  for (int r = 0; r < world; ++r) ranks[r] = r;
  return ranks;
}

class GlooCollectives : public testing::TestWithParam<int> {};

TEST_P(GlooCollectives, MatchValuesComputedForEveryRank) {
  const int world = GetParam();
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << ", world " << world);
  std::string store = FreshTempDir("gloo");
  ASSERT_FALSE(store.empty());
  ExpectAllPassed(RunRanks(store, world, AllRanks(world),
                           {"--scenario", "collectives", "--seed", std::to_string(seed)},
                           std::chrono::seconds(90)));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectives, testing::Values(1, 2, 4));

TEST(GlooRendezvous, ARankThatNeverArrivesIsNamedAfterTheTimeout) {
  auto store = FileStore::Open(FreshTempDir("gloo-missing"));
  ASSERT_TRUE(store.ok());
  GlooOptions options;
  options.timeout = milliseconds(2000);
  const auto start = std::chrono::steady_clock::now();
  auto comm = MakeGlooCommunicator(**store, 0, 2, options);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(comm.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.status())) << comm.status();
  EXPECT_NE(comm.status().message().find("rank 1 of 2 did not arrive"), std::string::npos)
      << comm.status();
  EXPECT_GE(waited, milliseconds(2000));
  EXPECT_LT(waited, milliseconds(5000));
}

TEST(GlooRendezvous, SeveralMissingRanksAreAllNamedByEveryWaitingRank) {
  std::string store = FreshTempDir("gloo-missing4");
  ExpectAllPassed(RunRanks(store, 4, {0, 2},
                           {"--scenario", "missing", "--missing", "1, 3", "--timeout_ms", "1500"},
                           std::chrono::seconds(30)));
}

TEST(GlooFailure, APeerThatExitsMidCollectiveIsAnErrorNotAHang) {
  std::string store = FreshTempDir("gloo-exit");
  ExpectAllPassed(RunRanks(store, 2, {0, 1}, {"--scenario", "peer_exits", "--timeout_ms", "3000"},
                           std::chrono::seconds(30)));
}

TEST(GlooFailure, APeerThatStopsCallingIsDeadlineExceeded) {
  std::string store = FreshTempDir("gloo-stall");
  std::vector<RankResult> results = RunRanks(
      store, 2, {0, 1}, {"--scenario", "peer_stalls", "--timeout_ms", "2000"}, std::chrono::seconds(8));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[0].timed_out) << "rank 0 hung instead of timing out";
  EXPECT_EQ(results[0].exit_code, 0);
  // rank 1 sleeps on purpose and is killed by the deadline.
}

TEST(GlooArguments, BadRankOrWorldSizeIsInvalidArgument) {
  auto store = FileStore::Open(FreshTempDir("gloo-args"));
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(MakeGlooCommunicator(**store, 2, 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(MakeGlooCommunicator(**store, -1, 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(MakeGlooCommunicator(**store, 0, 0).status()));
}

}  // namespace
}  // namespace tpserve::comm_test
