// NgramProposer: matching (longest n, most recent occurrence), the proposal's
// bounds, the window's eviction and the index's size bound, and random
// sequences against the brute-force search of oracle.h.
#include "speculative/ngram_proposer.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/speculative/oracle.h"
#include "tests/testing/seed.h"

namespace tpserve::speculative {
namespace {

std::vector<int32_t> Propose(const NgramProposer& p, size_t room = 64) {
  std::vector<int32_t> out(room, -1);
  out.resize(static_cast<size_t>(p.Propose(out)));
  return out;
}

NgramProposer Make(const NgramOptions& o) {
  absl::StatusOr<NgramProposer> p = NgramProposer::Create(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

TEST(NgramProposerTest, ProposesWhatFollowedTheLastNTokens) {
  NgramProposer p = Make({.prompt_lookup_min = 2, .prompt_lookup_max = 3, .num_speculative_tokens = 3});
  p.Append(std::vector<int32_t>{10, 11, 12, 13, 14, 15, 20, 11, 12});
  EXPECT_EQ(Propose(p), (std::vector<int32_t>{13, 14, 15}));
  p.Append(13);  // "11 12 13" now matches at n = 3
  EXPECT_EQ(Propose(p), (std::vector<int32_t>{14, 15, 20}));
}

TEST(NgramProposerTest, LongestNWinsThenTheMostRecentOccurrence) {
  NgramProposer p = Make({.prompt_lookup_min = 1, .prompt_lookup_max = 2, .num_speculative_tokens = 1});
  // "1 2" occurred once (then 9); "2" last occurred before 7.
  p.Append(std::vector<int32_t>{1, 2, 9, 5, 2, 7, 1, 2});
  EXPECT_EQ(Propose(p), (std::vector<int32_t>{9}));
  NgramProposer q = Make({.prompt_lookup_min = 1, .prompt_lookup_max = 2, .num_speculative_tokens = 1});
  q.Append(std::vector<int32_t>{1, 2, 9, 5, 2, 7, 3, 2});  // "3 2" is new; "2": most recent is before 7
  EXPECT_EQ(Propose(q), (std::vector<int32_t>{7}));
}

TEST(NgramProposerTest, NoMatchNoProposal) {
  NgramProposer p = Make({.prompt_lookup_min = 2, .prompt_lookup_max = 3});
  EXPECT_TRUE(Propose(p).empty());
  p.Append(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7});
  EXPECT_TRUE(Propose(p).empty());
  p.Append(1);  // one token of "1 2" is not a 2-gram match
  EXPECT_TRUE(Propose(p).empty());
}

TEST(NgramProposerTest, ProposalStopsAtTheSequenceEndAndTheRoomGiven) {
  NgramProposer p = Make({.prompt_lookup_min = 1, .prompt_lookup_max = 2, .num_speculative_tokens = 8});
  p.Append(std::vector<int32_t>{4, 5, 6, 4, 5});  // "4 5" at 0..1, followed by 6, 4, 5 (the end)
  EXPECT_EQ(Propose(p), (std::vector<int32_t>{6, 4, 5}));
  EXPECT_EQ(Propose(p, 2), (std::vector<int32_t>{6, 4}));
  EXPECT_TRUE(Propose(p, 0).empty());
  NgramProposer q = Make({.prompt_lookup_min = 1, .prompt_lookup_max = 1, .num_speculative_tokens = 8});
  q.Append(std::vector<int32_t>{3, 3, 3});  // overlapping: "3" ended at 1, followed by the last 3
  EXPECT_EQ(Propose(q), (std::vector<int32_t>{3}));
}

TEST(NgramProposerTest, ForgetsWhatLeftTheWindowAndTheIndexStaysBounded) {
  const NgramOptions o{.prompt_lookup_min = 2, .prompt_lookup_max = 3, .num_speculative_tokens = 2,
                       .max_history = 8};
  NgramProposer p = Make(o);
  p.Append(std::vector<int32_t>{1, 2, 3, 40, 41, 42, 43, 44, 45, 46});  // "1 2 3" left the window
  p.Append(std::vector<int32_t>{1, 2});
  EXPECT_TRUE(Propose(p).empty());
  EXPECT_EQ(p.window().begin(), 4);
  std::mt19937 rng(static_cast<uint32_t>(testing_util::TestSeed()));
  for (int i = 0; i < 5000; ++i) {
    p.Append(static_cast<int32_t>(rng() % 5));
    ASSERT_LE(p.index_size(), static_cast<size_t>(o.max_history * (o.prompt_lookup_max - o.prompt_lookup_min + 1)));
  }
}

TEST(NgramProposerTest, RandomSequencesMatchTheBruteForceSearch) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 60; ++round) {
    const int32_t lo = 1 + static_cast<int32_t>(rng() % 3), hi = lo + static_cast<int32_t>(rng() % 3);
    const NgramOptions o{.prompt_lookup_min = lo, .prompt_lookup_max = hi,
                         .num_speculative_tokens = 1 + static_cast<int32_t>(rng() % 6),
                         .max_history = hi + 1 + static_cast<int64_t>(rng() % 40)};
    NgramProposer p = Make(o);
    const int alphabet = 2 + static_cast<int>(rng() % 6);
    std::vector<int32_t> all;
    for (int i = 0; i < 300; ++i) {
      all.push_back(static_cast<int32_t>(rng() % alphabet));
      p.Append(all.back());
      const int64_t begin = std::max<int64_t>(0, static_cast<int64_t>(all.size()) - o.max_history);
      ASSERT_EQ(Propose(p), oracle::NgramPropose(all, begin, lo, hi, o.num_speculative_tokens))
          << "round " << round << " token " << i;
    }
  }
}

TEST(NgramProposerTest, OptionsOutsideTheirRangesAreRefusedByName) {
  EXPECT_TRUE(NgramProposer::Create({.prompt_lookup_min = 0}).status().message().find("prompt_lookup_min") !=
              std::string::npos);
  EXPECT_TRUE(NgramProposer::Create({.prompt_lookup_min = 3, .prompt_lookup_max = 2})
                  .status().message().find("prompt_lookup_max") != std::string::npos);
  EXPECT_TRUE(NgramProposer::Create({.num_speculative_tokens = 0}).status().message().find(
                  "num_speculative_tokens") != std::string::npos);
  EXPECT_TRUE(NgramProposer::Create({.prompt_lookup_max = 4, .max_history = 4}).status().message().find(
                  "max_history") != std::string::npos);
}

}  // namespace
}  // namespace tpserve::speculative
