// DpRouter (coordinator/dp_router.h), no gRPC, no engine.
//
// The index against its oracle: after a random workload with shared
// prefixes and evictions on three real BlockManagers (each the router's
// observer), the router's cached prefix of every prompt, per group, equals
// what that group's BlockManager finds by scanning its own cache
// (CachedPrefixTokens). Then the policies' properties: requests sharing a
// prefix go to the group that holds it until its load exceeds the least
// loaded one's by the bound, then spill; round-robin cycles; least-load picks
// the least loaded; a cleared group no longer attracts its prefixes.
#include "coordinator/dp_router.h"

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/seed.h"

namespace tpserve {
namespace {

constexpr int32_t kBlockSize = 4;

struct Live {
  std::vector<int32_t> tokens;
  std::vector<BlockId> table;
  BlockHashChain chain;
};

// Computes `tokens` as a prompt on `blocks` (its full blocks enter the cache) and keeps it live.
bool RunPrompt(BlockManager& blocks, std::vector<int32_t> tokens, std::vector<Live>& live) {
  Live l;
  l.tokens = std::move(tokens);
  const int64_t n = static_cast<int64_t>(l.tokens.size());
  if (!blocks.AllocatePrompt(l.tokens, n, l.table)) return false;
  blocks.CommitFullBlocks(l.tokens, n, l.table, l.chain);
  live.push_back(std::move(l));
  return true;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, size_t n, int vocab) {
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// The prompt's block hashes, as EngineGroups::Submit computes them once per request.
std::vector<uint64_t> Hashes(const std::vector<int32_t>& prompt) {
  std::vector<uint64_t> h;
  BlockManager::ExtendBlockHashes(prompt, kBlockSize, h);
  return h;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(DpRouter, IndexEqualsEachGroupsPrefixCacheAfterARandomWorkload) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  constexpr int kGroups = 3;
  DpRouter router({.groups = kGroups, .policy = DpRouting::kCacheAware, .block_size = kBlockSize});
  std::vector<std::unique_ptr<BlockManager>> groups;
  std::vector<std::vector<Live>> live(kGroups);
  for (int g = 0; g < kGroups; ++g) {
    // Odd, small caches: prompts evict each other's blocks.
    groups.push_back(std::make_unique<BlockManager>(23 + 6 * g, kBlockSize));
    groups.back()->set_observer(router.observer(g));
  }
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 6; ++i) prefixes.push_back(RandomTokens(rng, kBlockSize * (1 + rng() % 4), 40));
  auto prompt = [&] {
    // A shared prefix, a tail of 1..9 tokens: some prompts end inside a block.
    return Concat(prefixes[rng() % prefixes.size()], RandomTokens(rng, 1 + rng() % 9, 40));
  };
  for (int round = 0; round < 400; ++round) {
    const int g = static_cast<int>(rng() % kGroups);
    auto& lv = live[static_cast<size_t>(g)];
    BlockManager& blocks = *groups[static_cast<size_t>(g)];
    // A third of the time a live prompt ends; else a new one runs, or, when
    // the cache is full, one ends (its blocks stay cached until reused).
    if ((!lv.empty() && rng() % 3 == 0) || (!RunPrompt(blocks, prompt(), lv) && !lv.empty())) {
      const size_t victim = rng() % lv.size();
      blocks.Free(lv[victim].table);
      lv.erase(lv.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    if (round % 20 != 19) continue;
    for (int probe = 0; probe < 20; ++probe) {
      // A length that is not a multiple of the block: CachedPrefixTokens then
      // looks at every full block, as the router does.
      std::vector<int32_t> p = prompt();
      if (p.size() % kBlockSize == 0) p.push_back(7);
      const std::vector<int64_t> got = router.CachedPrefixBlocks(Hashes(p));
      for (int gi = 0; gi < kGroups; ++gi) {
        EXPECT_EQ(got[static_cast<size_t>(gi)] * kBlockSize, groups[static_cast<size_t>(gi)]->CachedPrefixTokens(p))
            << "group " << gi << " round " << round;
      }
    }
  }
  size_t union_size = 0;
  {
    std::vector<uint64_t> all;
    for (auto& b : groups) {
      auto h = b->CachedHashes();
      all.insert(all.end(), h.begin(), h.end());
    }
    std::sort(all.begin(), all.end());
    union_size = static_cast<size_t>(std::unique(all.begin(), all.end()) - all.begin());
  }
  EXPECT_EQ(router.indexed_hashes(), union_size);
  for (int g = 0; g < kGroups; ++g) router.OnCleared(g);
  EXPECT_EQ(router.indexed_hashes(), 0u);
}

// Two groups with caches big enough never to evict; group `g` computes `p`.
struct TwoGroups {
  explicit TwoGroups(DpRouterOptions o) : router(o) {
    for (int g = 0; g < o.groups; ++g) {
      blocks.push_back(std::make_unique<BlockManager>(4096, kBlockSize));
      blocks.back()->set_observer(router.observer(g));
      live.emplace_back();
    }
  }
  void Compute(int g, const std::vector<int32_t>& p) {
    ASSERT_TRUE(RunPrompt(*blocks[static_cast<size_t>(g)], p, live[static_cast<size_t>(g)]));
  }
  DpRouter router;
  std::vector<std::unique_ptr<BlockManager>> blocks;
  std::vector<std::vector<Live>> live;
};

TEST(DpRouter, SharedPrefixStaysOnItsGroupUntilTheLoadBoundThenSpills) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  constexpr int64_t kBound = 3;
  TwoGroups t({.groups = 2, .policy = DpRouting::kCacheAware, .block_size = kBlockSize, .load_bound = kBound});
  const std::vector<int32_t> system = RandomTokens(rng, kBlockSize * 5, 1000);
  // The first request finds nothing cached: least loaded, group 0 (ties from the cursor at 0).
  const DpRoute first = t.router.Route(Hashes(Concat(system, RandomTokens(rng, 3, 1000))));
  EXPECT_EQ(first.group, 0);
  EXPECT_EQ(first.cached_blocks, 0);
  t.Compute(first.group, Concat(system, RandomTokens(rng, 3, 1000)));
  // Group 0 now holds the prefix: the next ones follow it while its load is
  // at most group 1's (0) plus the bound.
  for (int64_t i = 1; i <= kBound; ++i) {
    const DpRoute r = t.router.Route(Hashes(Concat(system, RandomTokens(rng, 2 + i, 1000))));
    EXPECT_EQ(r.group, 0) << "request " << i;
    EXPECT_EQ(r.cached_blocks, 5);
  }
  EXPECT_EQ(t.router.load(0), kBound + 1);
  // Load 0 - load 1 = bound + 1 > bound: spill to the least loaded.
  const DpRoute spill = t.router.Route(Hashes(Concat(system, RandomTokens(rng, 9, 1000))));
  EXPECT_EQ(spill.group, 1);
  EXPECT_EQ(spill.cached_blocks, 0);
  // Once group 0 has drained below the bound again, the prefix goes back to it.
  t.router.Release(0);
  t.router.Release(0);
  const DpRoute back = t.router.Route(Hashes(Concat(system, RandomTokens(rng, 4, 1000))));
  EXPECT_EQ(back.group, 0);
  // A prompt sharing only the first two blocks still prefers the group holding them.
  std::vector<int32_t> partial(system.begin(), system.begin() + 2 * kBlockSize);
  partial = Concat(partial, RandomTokens(rng, 3 * kBlockSize, 1000));
  EXPECT_EQ(t.router.CachedPrefixBlocks(Hashes(partial)), (std::vector<int64_t>{2, 0}));
}

TEST(DpRouter, LongestPrefixWinsOverAShorterOneElsewhere) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  TwoGroups t({.groups = 2, .policy = DpRouting::kCacheAware, .block_size = kBlockSize, .load_bound = 8});
  const std::vector<int32_t> history = RandomTokens(rng, kBlockSize * 6, 1000);
  // Group 1 holds the first two blocks, group 0 all six.
  t.Compute(1, std::vector<int32_t>(history.begin(), history.begin() + 2 * kBlockSize + 1));
  t.Compute(0, Concat(history, {1}));
  const std::vector<int32_t> next_turn = Concat(history, RandomTokens(rng, 3 * kBlockSize, 1000));
  EXPECT_EQ(t.router.CachedPrefixBlocks(Hashes(next_turn)), (std::vector<int64_t>{6, 2}));
  const DpRoute r = t.router.Route(Hashes(next_turn));
  EXPECT_EQ(r.group, 0);
  EXPECT_EQ(r.cached_blocks, 6);
  // Group 0 evicting its copy (a new cache) sends the prompt to group 1's shorter prefix.
  t.router.OnCleared(0);
  const DpRoute after = t.router.Route(Hashes(next_turn));
  EXPECT_EQ(after.group, 1);
  EXPECT_EQ(after.cached_blocks, 2);
}

TEST(DpRouter, RoundRobinCyclesWhateverThePrompt) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  TwoGroups t({.groups = 3, .policy = DpRouting::kRoundRobin, .block_size = kBlockSize});
  const std::vector<int32_t> p = RandomTokens(rng, kBlockSize * 3 + 1, 1000);
  t.Compute(2, p);  // cached on group 2: round-robin does not look
  for (int i = 0; i < 9; ++i) {
    const DpRoute r = t.router.Route(Hashes(p));
    EXPECT_EQ(r.group, i % 3) << "request " << i;
    EXPECT_EQ(r.cached_blocks, 0);
  }
  EXPECT_EQ(t.router.load(0), 3);
  EXPECT_EQ(t.router.load(2), 3);
}

TEST(DpRouter, LeastLoadPicksTheLeastLoadedAndAlternatesOnTies) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  constexpr int kGroups = 4;
  TwoGroups t({.groups = kGroups, .policy = DpRouting::kLeastLoad, .block_size = kBlockSize});
  const std::vector<int32_t> p = RandomTokens(rng, 5, 1000);
  // Equal loads: each group once, in turn.
  for (int i = 0; i < kGroups; ++i) EXPECT_EQ(t.router.Route(Hashes(p)).group, i);
  // Random releases and routes: every route goes to a group whose load was the minimum.
  for (int i = 0; i < 300; ++i) {
    const int g = static_cast<int>(rng() % kGroups);
    if (rng() % 2 == 0 && t.router.load(g) > 0) {
      t.router.Release(g);
      continue;
    }
    int64_t min_load = t.router.load(0);
    for (int k = 1; k < kGroups; ++k) min_load = std::min(min_load, t.router.load(k));
    const DpRoute r = t.router.Route(Hashes(p));
    EXPECT_EQ(t.router.load(r.group) - 1, min_load) << "step " << i;
  }
}

TEST(DpRouter, AnUnavailableGroupIsSkippedByEveryPolicy) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (DpRouting policy : {DpRouting::kCacheAware, DpRouting::kRoundRobin, DpRouting::kLeastLoad}) {
    SCOPED_TRACE(DpRoutingName(policy));
    TwoGroups t({.groups = 3, .policy = policy, .block_size = kBlockSize, .load_bound = 100});
    const std::vector<int32_t> p = RandomTokens(rng, kBlockSize * 4 + 1, 1000);
    t.Compute(1, p);  // group 1 holds the prompt: cache-aware would pick it
    t.router.SetAvailable(1, false);
    EXPECT_FALSE(t.router.available(1));
    EXPECT_TRUE(t.router.available(0));
    for (int i = 0; i < 12; ++i) {
      const int g = t.router.Route(Hashes(p)).group;
      EXPECT_NE(g, 1) << "request " << i;
      if (i % 2 == 1) t.router.Release(g);
    }
    EXPECT_EQ(t.router.load(1), 0);
    t.router.SetAvailable(1, true);
    if (policy == DpRouting::kCacheAware) {
      EXPECT_EQ(t.router.Route(Hashes(p)).group, 1);
    }
    // None available: every policy still answers a group (which refuses with its own status).
    for (int g = 0; g < 3; ++g) t.router.SetAvailable(g, false);
    const int g = t.router.Route(Hashes(p)).group;
    EXPECT_TRUE(g >= 0 && g < 3) << g;
  }
}

TEST(DpRouter, OneGroupTakesEverything) {
  DpRouter router({.groups = 1, .policy = DpRouting::kCacheAware, .block_size = kBlockSize});
  const std::vector<int32_t> p(17, 3);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(router.Route(Hashes(p)).group, 0);
  EXPECT_EQ(router.load(0), 5);
}

TEST(DpRouter, FlagErrorsNameTheFlag) {
  EXPECT_EQ(*ParseDpRouting("cache-aware"), DpRouting::kCacheAware);
  EXPECT_EQ(*ParseDpRouting("round-robin"), DpRouting::kRoundRobin);
  EXPECT_EQ(*ParseDpRouting("least-load"), DpRouting::kLeastLoad);
  const auto bad = ParseDpRouting("random");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--dp-routing"), absl::string_view::npos) << bad.status();
  EXPECT_NE(ValidateDpRouterOptions({.groups = 65}).message().find("--dp"), absl::string_view::npos);
  EXPECT_NE(ValidateDpRouterOptions({.load_bound = -1}).message().find("--dp-load-bound"), absl::string_view::npos);
  for (DpRouting p : {DpRouting::kCacheAware, DpRouting::kRoundRobin, DpRouting::kLeastLoad}) {
    EXPECT_EQ(*ParseDpRouting(DpRoutingName(p)), p);
  }
}

}  // namespace
}  // namespace tpserve
