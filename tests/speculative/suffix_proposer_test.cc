// SuffixTrie, SuffixProposer and SuffixCache: counts against the brute force
// of oracle.h after every token (the window's eviction included), the node
// bounds, proposals (frequency, threshold, adaptive length), the cache's
// eviction by sequences and by tokens, and matches held across it.
#include "speculative/suffix_proposer.h"

#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/speculative/oracle.h"
#include "tests/testing/seed.h"

namespace tpserve::speculative {
namespace {

using Strings = std::map<std::vector<int32_t>, int64_t>;

Strings TrieStrings(const SuffixTrie& trie) {
  Strings out;
  trie.ForEachString([&](std::span<const int32_t> s, int64_t count) {
    out[std::vector<int32_t>(s.begin(), s.end())] = count;
  });
  return out;
}

SuffixProposer Make(const SuffixOptions& o, SuffixCache* cache = nullptr) {
  absl::StatusOr<SuffixProposer> p = SuffixProposer::Create(o, cache);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

std::vector<int32_t> Propose(SuffixProposer& p, SuffixProposer::Proposal* info = nullptr) {
  std::vector<int32_t> out(64, -1);
  const SuffixProposer::Proposal r = p.Propose(out);
  if (info != nullptr) *info = r;
  out.resize(static_cast<size_t>(r.num_tokens));
  return out;
}

TEST(SuffixTrieTest, AddAndRemoveKeepCountsAndFreeEmptyNodes) {
  SuffixTrie trie(3);
  trie.Add(std::vector<int32_t>{1, 2, 3, 4});  // 1, 1 2, 1 2 3 (depth 3)
  trie.Add(std::vector<int32_t>{1, 2, 5});
  EXPECT_EQ(TrieStrings(trie), (Strings{{{1}, 2}, {{1, 2}, 2}, {{1, 2, 3}, 1}, {{1, 2, 5}, 1}}));
  const int32_t n12 = trie.Child(trie.Child(SuffixTrie::kRoot, 1), 2);
  EXPECT_EQ(trie.continuations(n12), 2);
  const SuffixTrie::NodeRef ref = trie.Ref(trie.Child(n12, 3));
  trie.Remove(std::vector<int32_t>{1, 2, 3});
  EXPECT_FALSE(trie.Valid(ref));
  EXPECT_EQ(TrieStrings(trie), (Strings{{{1}, 1}, {{1, 2}, 1}, {{1, 2, 5}, 1}}));
  EXPECT_EQ(trie.token(trie.BestChild(n12)), 5);
  trie.Remove(std::vector<int32_t>{1, 2, 5});
  EXPECT_EQ(trie.num_nodes(), 1);
  trie.Add(std::vector<int32_t>{7});  // a freed slot is reused under a new generation
  EXPECT_FALSE(trie.Valid(ref));
}

TEST(SuffixProposerTest, LocalTrieHoldsEveryStringOfTheWindowAfterEveryToken) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    const SuffixOptions o{.max_depth = 2 + static_cast<int32_t>(rng() % 5),
                          .max_history = 8 + static_cast<int64_t>(rng() % 24)};
    SuffixProposer p = Make(o);
    const int alphabet = 2 + static_cast<int>(rng() % 4);
    std::vector<int32_t> all;
    for (int i = 0; i < 120; ++i) {
      all.push_back(static_cast<int32_t>(rng() % alphabet));
      p.Append(all.back());
      const int64_t begin = std::max<int64_t>(0, static_cast<int64_t>(all.size()) - o.max_history);
      const Strings want = oracle::Substrings(all, begin, o.max_depth);
      ASSERT_EQ(TrieStrings(p.local_trie()), want) << "round " << round << " token " << i;
      ASSERT_EQ(p.local_trie().num_nodes(), static_cast<int64_t>(want.size()) + 1);
      ASSERT_LE(p.local_trie().num_nodes(), 1 + o.max_history * o.max_depth);
    }
  }
}

TEST(SuffixProposerTest, ProposesTheMostFrequentContinuation) {
  SuffixProposer p = Make({.max_depth = 8, .num_speculative_tokens = 4, .min_token_prob = 0});
  // "9" was followed by 1 three times and by 2 once; no longer suffix recurs.
  p.Append(std::vector<int32_t>{9, 1, 3, 9, 1, 4, 9, 2, 5, 9, 1, 6, 9});
  SuffixProposer::Proposal info;
  EXPECT_EQ(Propose(p, &info), (std::vector<int32_t>{1}));  // 1 token matched: 1 proposed
  EXPECT_EQ(info.match_length, 1);
  EXPECT_FALSE(info.from_cache);
  EXPECT_EQ(info.score, 0.75);
}

TEST(SuffixProposerTest, TheChainStopsBelowMinTokenProb) {
  // After "1 2": 3 twice, 4 twice, 5 once: the best child has probability 2/5.
  const std::vector<int32_t> text{1, 2, 3, 0, 1, 2, 4, 0, 1, 2, 3, 0, 1, 2, 4, 0, 1, 2, 5, 0, 1, 2};
  SuffixProposer loose = Make({.max_depth = 3, .min_token_prob = 0.3});
  loose.Append(text);
  EXPECT_EQ(Propose(loose).size(), 1u);
  SuffixProposer strict = Make({.max_depth = 3, .min_token_prob = 0.5});
  strict.Append(text);
  EXPECT_TRUE(Propose(strict).empty());
}

TEST(SuffixProposerTest, AdaptiveLengthFollowsTheMatchLength) {
  const std::vector<int32_t> text{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3};
  SuffixProposer p = Make({.max_depth = 16, .num_speculative_tokens = 8, .max_spec_factor = 1.0});
  p.Append(text);
  EXPECT_EQ(Propose(p), (std::vector<int32_t>{4, 5, 6}));  // 3 matched: 3 tokens
  SuffixProposer q = Make({.max_depth = 16, .num_speculative_tokens = 8, .max_spec_factor = 2.0,
                           .max_spec_offset = 1.0});
  q.Append(text);
  EXPECT_EQ(Propose(q), (std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10}));  // 2 x 3 + 1
  SuffixProposer r = Make({.max_depth = 16, .num_speculative_tokens = 2, .max_spec_factor = 4.0});
  r.Append(text);
  EXPECT_EQ(Propose(r), (std::vector<int32_t>{4, 5}));  // num_speculative_tokens caps it
  // Strings of 5 tokens leave no room past 5 - 8: the match is 1 token, the chain 4 (factor 4 x 1).
  SuffixProposer shallow = Make({.max_depth = 5, .num_speculative_tokens = 8, .max_spec_factor = 4.0});
  shallow.Append(text);
  SuffixProposer::Proposal info;
  EXPECT_EQ(Propose(shallow, &info), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(info.match_length, 1);
  SuffixProposer roomy = Make({.max_depth = 8, .num_speculative_tokens = 4, .max_spec_factor = 1.0});
  roomy.Append(text);
  EXPECT_EQ(Propose(roomy, &info), (std::vector<int32_t>{4, 5, 6}));  // 3 matched (<= 8 - 4), 3 proposed
  EXPECT_EQ(info.match_length, 3);
}

TEST(SuffixProposerTest, TheCacheProposesFromEarlierOutputs) {
  absl::StatusOr<SuffixCache> cache = SuffixCache::Create({.max_depth = 8});
  ASSERT_TRUE(cache.ok());
  cache->AddOutput(std::vector<int32_t>{100, 101, 102, 103, 104, 105});
  SuffixProposer p = Make({.max_depth = 8, .num_speculative_tokens = 4}, &*cache);
  p.Append(std::vector<int32_t>{7, 8, 100, 101});
  SuffixProposer::Proposal info;
  EXPECT_EQ(Propose(p, &info), (std::vector<int32_t>{102, 103}));  // 2 matched, factor 1
  EXPECT_TRUE(info.from_cache);
  p.Append(102);
  EXPECT_EQ(Propose(p), (std::vector<int32_t>{103, 104, 105}));
}

TEST(SuffixProposerTest, TheCacheEvictsTheOldestOutputsByCountAndTokens) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const SuffixCacheOptions o{.max_depth = 4, .max_cached_sequences = 3, .max_cached_tokens = 40};
  absl::StatusOr<SuffixCache> cache = SuffixCache::Create(o);
  ASSERT_TRUE(cache.ok());
  std::vector<std::vector<int32_t>> kept;
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> out(1 + rng() % 60);
    for (int32_t& t : out) t = static_cast<int32_t>(rng() % 4);
    cache->AddOutput(out);
    if (out.size() > 40) out.erase(out.begin(), out.end() - 40);
    kept.push_back(out);
    int64_t tokens = 0;
    size_t first = kept.size();
    while (first > 0 && kept.size() - first < 3 && tokens + static_cast<int64_t>(kept[first - 1].size()) <= 40) {
      tokens += static_cast<int64_t>(kept[--first].size());
    }
    Strings want;
    for (size_t s = first; s < kept.size(); ++s) {
      for (const auto& [str, n] : oracle::Substrings(kept[s], 0, o.max_depth)) want[str] += n;
    }
    ASSERT_EQ(cache->num_sequences(), static_cast<int64_t>(kept.size() - first)) << i;
    ASSERT_EQ(cache->num_tokens(), tokens) << i;
    ASSERT_EQ(TrieStrings(cache->trie()), want) << i;
  }
}

TEST(SuffixProposerTest, MatchesHeldAcrossCacheEvictionNeverProposeWhatIsGone) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  absl::StatusOr<SuffixCache> cache =
      SuffixCache::Create({.max_depth = 6, .max_cached_sequences = 2, .max_cached_tokens = 64});
  ASSERT_TRUE(cache.ok());
  std::vector<std::vector<int32_t>> outputs;
  SuffixProposer p = Make({.max_depth = 6, .num_speculative_tokens = 5, .min_token_prob = 0}, &*cache);
  std::vector<int32_t> seq;
  for (int i = 0; i < 400; ++i) {
    if (rng() % 7 == 0) {
      std::vector<int32_t> out(8 + rng() % 24);
      for (int32_t& t : out) t = static_cast<int32_t>(rng() % 5);
      cache->AddOutput(out);
      outputs.push_back(out);
    }
    seq.push_back(static_cast<int32_t>(rng() % 5));
    p.Append(seq.back());
    SuffixProposer::Proposal info;
    const std::vector<int32_t> got = Propose(p, &info);
    if (!info.from_cache || got.empty()) continue;
    // The matched suffix and the chain are one string of a cached output.
    std::vector<int32_t> str(seq.end() - info.match_length, seq.end());
    str.insert(str.end(), got.begin(), got.end());
    bool found = false;
    for (size_t s = outputs.size() >= 2 ? outputs.size() - 2 : 0; s < outputs.size(); ++s) {
      found = found || oracle::Occurs(outputs[s], str);
    }
    ASSERT_TRUE(found) << "token " << i;
  }
}

TEST(SuffixProposerTest, OptionsOutsideTheirRangesAreRefusedByName) {
  EXPECT_NE(SuffixProposer::Create({.max_depth = 1}, nullptr).status().message().find("max_depth"),
            std::string::npos);
  EXPECT_NE(SuffixProposer::Create({.min_token_prob = 2}, nullptr).status().message().find("min_token_prob"),
            std::string::npos);
  EXPECT_NE(SuffixProposer::Create({.max_depth = 8, .max_history = 8}, nullptr).status().message().find(
                "max_history"), std::string::npos);
  EXPECT_NE(SuffixCache::Create({.max_cached_tokens = 0}).status().message().find("max_cached_tokens"),
            std::string::npos);
}

}  // namespace
}  // namespace tpserve::speculative
