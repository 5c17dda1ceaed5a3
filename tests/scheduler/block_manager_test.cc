#include "scheduler/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace tpserve {
namespace {

std::vector<int32_t> Iota(int n, int start) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Allocates and "computes" a whole prompt, registering its full blocks.
std::vector<BlockId> RunPrompt(BlockManager& bm, const std::vector<int32_t>& prompt,
                               int64_t* cached = nullptr) {
  std::vector<BlockId> table;
  auto got = bm.AllocatePrompt(prompt, static_cast<int64_t>(prompt.size()), table);
  EXPECT_TRUE(got.has_value());
  if (cached) *cached = got.value_or(-1);
  BlockHashChain chain;
  bm.CommitFullBlocks(prompt, static_cast<int64_t>(prompt.size()), table, chain);
  return table;
}

TEST(BlockManager, AllocatesEnoughBlocksForThePrompt) {
  BlockManager bm(8, 4);
  std::vector<BlockId> table;
  const auto prompt = Iota(10, 100);
  ASSERT_EQ(bm.AllocatePrompt(prompt, 10, table), 0);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(std::set<BlockId>(table.begin(), table.end()).size(), 3u);
  EXPECT_EQ(bm.num_free_blocks(), 5);
}

TEST(BlockManager, SamePromptSharesItsFullBlocks) {
  BlockManager bm(16, 4);
  const auto prompt = Iota(10, 100);  // blocks [0..3] [4..7] [8, 9]
  auto a = RunPrompt(bm, prompt);
  int64_t cached = -1;
  auto b = RunPrompt(bm, prompt, &cached);
  EXPECT_EQ(cached, 8);
  EXPECT_EQ(b[0], a[0]);
  EXPECT_EQ(b[1], a[1]);
  EXPECT_NE(b[2], a[2]);  // the partial last block is never shared
  EXPECT_EQ(bm.num_free_blocks(), 16 - 4);
  EXPECT_EQ(bm.stats().prefix_hits, 2);
  EXPECT_EQ(bm.stats().prefix_queries, 4);
  EXPECT_DOUBLE_EQ(bm.stats().prefix_hit_rate(), 0.5);
}

TEST(BlockManager, AWhollyCachedPromptStillComputesItsLastToken) {
  BlockManager bm(16, 4);
  const auto prompt = Iota(8, 1);  // exactly two full blocks
  RunPrompt(bm, prompt);
  EXPECT_EQ(bm.CachedPrefixTokens(prompt), 4);
  int64_t cached = -1;
  auto b = RunPrompt(bm, prompt, &cached);
  EXPECT_EQ(cached, 4);
  EXPECT_EQ(b.size(), 2u);
}

TEST(BlockManager, HashesChainThePrefix) {
  BlockManager bm(16, 4);
  auto first = Iota(9, 0);
  RunPrompt(bm, first);
  // Same second block, different first block: nothing may be shared.
  auto other = first;
  other[0] = 999;
  EXPECT_EQ(bm.CachedPrefixTokens(other), 0);
  // Same first block, different second block: only the first is shared.
  auto fork = first;
  fork[5] = 999;
  EXPECT_EQ(bm.CachedPrefixTokens(fork), 4);
}

TEST(BlockManager, FreedBlocksKeepTheirHashUntilReused) {
  BlockManager bm(4, 4);
  const auto prompt = Iota(9, 50);
  auto a = RunPrompt(bm, prompt);
  bm.Free(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(bm.num_free_blocks(), 4);
  EXPECT_EQ(bm.stats().cached_blocks, 2);
  int64_t cached = -1;
  auto b = RunPrompt(bm, prompt, &cached);
  EXPECT_EQ(cached, 8);
  EXPECT_EQ(bm.num_free_blocks(), 1);
}

TEST(BlockManager, EvictsTheLeastRecentlyFreedBlocksFirst) {
  BlockManager bm(6, 2);
  auto p1 = Iota(5, 10);  // 2 full blocks + 1
  auto p2 = Iota(5, 20);
  auto t1 = RunPrompt(bm, p1);
  auto t2 = RunPrompt(bm, p2);
  bm.Free(t1);  // freed first: evicted first
  bm.Free(t2);
  // Needs 3 blocks: the 3 oldest free ones, all of p1's.
  auto t3 = RunPrompt(bm, Iota(5, 30));
  EXPECT_EQ(bm.CachedPrefixTokens(p1), 0);
  EXPECT_EQ(bm.CachedPrefixTokens(p2), 4);
  bm.Free(t3);
}

TEST(BlockManager, ReusingCachedFreeBlocksCountsAgainstTheFreePool) {
  BlockManager bm(3, 2);
  auto p = Iota(5, 1);  // 3 blocks, 2 cacheable
  auto t = RunPrompt(bm, p);
  bm.Free(t);
  std::vector<BlockId> table;
  // Cached blocks are in the free queue; reusing them still fits exactly.
  ASSERT_EQ(bm.AllocatePrompt(p, 5, table), 4);
  EXPECT_EQ(bm.num_free_blocks(), 0);
}

TEST(BlockManager, FailedAllocationChangesNothing) {
  BlockManager bm(4, 4);
  auto t = RunPrompt(bm, Iota(9, 0));  // 3 blocks
  std::vector<BlockId> table;
  EXPECT_FALSE(bm.AllocatePrompt(Iota(9, 100), 9, table).has_value());
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(bm.num_free_blocks(), 1);
  EXPECT_FALSE(bm.Grow(t, 17));
  EXPECT_EQ(t.size(), 3u);
  EXPECT_TRUE(bm.Grow(t, 16));
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(bm.num_free_blocks(), 0);
}

TEST(BlockManager, AbortFreesEveryBlockOfASharedPrefixOnlyOnce) {
  BlockManager bm(8, 4);
  const auto prompt = Iota(12, 7);
  auto a = RunPrompt(bm, prompt);
  auto b = RunPrompt(bm, prompt);  // shares 2 blocks
  EXPECT_EQ(bm.num_free_blocks(), 8 - 3 - 1);
  bm.Free(b);  // aborted
  EXPECT_EQ(bm.num_free_blocks(), 8 - 3);
  bm.Free(a);
  EXPECT_EQ(bm.num_free_blocks(), 8);
}

TEST(BlockManager, DisabledPrefixCachingSharesNothing) {
  BlockManager bm(8, 4, /*enable_prefix_caching=*/false);
  const auto prompt = Iota(9, 0);
  auto a = RunPrompt(bm, prompt);
  int64_t cached = -1;
  auto b = RunPrompt(bm, prompt, &cached);
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(bm.stats().cached_blocks, 0);
}

TEST(BlockManager, RandomWorkloadNeverLeaksOrDoubleAssigns) {
  const uint32_t seed = 1234;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  BlockManager bm(64, 3);
  std::vector<std::vector<BlockId>> live;
  for (int iter = 0; iter < 2000; ++iter) {
    if (!live.empty() && (rng() % 3 == 0 || bm.num_free_blocks() < 8)) {
      size_t i = rng() % live.size();
      bm.Free(live[i]);
      live.erase(live.begin() + i);
      continue;
    }
    // Prompts drawn from a few shared prefixes so blocks get shared.
    std::vector<int32_t> prompt = Iota(static_cast<int>(3 * (rng() % 4)), 1000 * (rng() % 3));
    for (int k = 1 + rng() % 7; k > 0; --k) prompt.push_back(static_cast<int32_t>(rng() % 50));
    std::vector<BlockId> table;
    if (!bm.AllocatePrompt(prompt, static_cast<int64_t>(prompt.size()), table)) continue;
    BlockHashChain chain;
    bm.CommitFullBlocks(prompt, static_cast<int64_t>(prompt.size()), table, chain);
    live.push_back(std::move(table));
  }
  // Distinct blocks in use + free blocks == all blocks.
  std::set<BlockId> used;
  for (auto& t : live) used.insert(t.begin(), t.end());
  EXPECT_EQ(static_cast<int64_t>(used.size()) + bm.num_free_blocks(), 64);
  for (auto& t : live) bm.Free(t);
  EXPECT_EQ(bm.num_free_blocks(), 64);
}

// The one chain (ExtendBlockHashes) against HashBlock applied block by block,
// and extended in steps as a sequence's blocks fill.
TEST(BlockManager, ExtendBlockHashesIsTheChainOfHashBlockInAnySteps) {
  const std::vector<int32_t> tokens = Iota(23, 5);  // 7 full blocks of 3, 2 tokens over
  std::vector<uint64_t> oracle;
  for (int i = 0; i < 7; ++i) {
    oracle.push_back(BlockManager::HashBlock(i == 0 ? 0 : oracle.back(), std::span(tokens).subspan(3 * i, 3)));
  }
  std::vector<uint64_t> whole;
  BlockManager::ExtendBlockHashes(tokens, 3, whole);
  EXPECT_EQ(whole, oracle);
  std::vector<uint64_t> steps;
  for (int64_t upto : {0, 2, 2, 5, 100}) BlockManager::ExtendBlockHashes(tokens, 3, steps, upto);
  EXPECT_EQ(steps, oracle);
  std::vector<uint64_t> from_prompt;  // a prompt of 10 tokens, then its outputs
  BlockManager::ExtendBlockHashes(std::span(tokens).first(10), 3, from_prompt);
  ASSERT_EQ(from_prompt.size(), 3u);
  BlockManager::ExtendBlockHashes(tokens, 3, from_prompt);
  EXPECT_EQ(from_prompt, oracle);
}

// HashBlock digests a block in independent lanes (token pairs, four chains)
// and mixes the parent in last: whatever the block size (1..33 covers every
// lane remainder and an odd count), changing any one token, swapping two
// different tokens, appending a token 0 or changing the parent changes the
// hash, and 200,000 distinct random blocks get distinct hashes.
TEST(BlockManager, HashBlockDependsOnEveryTokenItsPlaceTheCountAndTheParent) {
  const uint32_t seed = 30;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (size_t n = 1; n <= 33; ++n) {
    SCOPED_TRACE("block size " + std::to_string(n));
    std::vector<int32_t> block(n);
    for (int32_t& t : block) t = static_cast<int32_t>(rng() % 200000);
    const uint64_t parent = (uint64_t{rng()} << 32) | rng();
    const uint64_t h = BlockManager::HashBlock(parent, block);
    EXPECT_NE(BlockManager::HashBlock(parent ^ 1, block), h);
    EXPECT_NE(BlockManager::HashBlock(0, block), h);
    std::vector<int32_t> longer = block;
    longer.push_back(0);
    EXPECT_NE(BlockManager::HashBlock(parent, longer), h) << "a trailing token 0 is a token";
    for (size_t i = 0; i < n; ++i) {
      std::vector<int32_t> changed = block;
      changed[i] ^= 1 << (rng() % 31);
      EXPECT_NE(BlockManager::HashBlock(parent, changed), h) << "token " << i;
      const size_t j = rng() % n;
      if (block[i] == block[j]) continue;
      std::vector<int32_t> swapped = block;
      std::swap(swapped[i], swapped[j]);
      EXPECT_NE(BlockManager::HashBlock(parent, swapped), h) << "tokens " << i << " and " << j << " swapped";
    }
  }
  std::set<std::vector<int32_t>> blocks;
  std::set<uint64_t> hashes;
  while (blocks.size() < 200000) {
    std::vector<int32_t> block(16);
    for (int32_t& t : block) t = static_cast<int32_t>(rng() % 4);  // few token values: many near neighbours
    if (blocks.insert(block).second) hashes.insert(BlockManager::HashBlock(0, block));
  }
  EXPECT_EQ(hashes.size(), blocks.size());
}

// The request's hashes given (computed once, before routing) against the
// block manager hashing the tokens itself: same cached prefix, same
// allocation, and the hashes registered are the ones given; over a random
// workload with evictions, with all, some or none of a prompt's hashes given.
TEST(BlockManager, GivenBlockHashesActAsHashingTheTokens) {
  const uint32_t seed = 4321;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  BlockManager given(40, 3), own(40, 3);
  std::vector<std::vector<BlockId>> live_given, live_own;
  for (int iter = 0; iter < 1500; ++iter) {
    if (!live_own.empty() && (rng() % 3 == 0 || own.num_free_blocks() < 8)) {
      const size_t i = rng() % live_own.size();
      given.Free(live_given[i]);
      own.Free(live_own[i]);
      live_given.erase(live_given.begin() + static_cast<std::ptrdiff_t>(i));
      live_own.erase(live_own.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    std::vector<int32_t> prompt = Iota(static_cast<int>(3 * (rng() % 4)), 1000 * static_cast<int>(rng() % 3));
    for (int k = 1 + static_cast<int>(rng() % 7); k > 0; --k) prompt.push_back(static_cast<int32_t>(rng() % 50));
    BlockHashChain chain_given, chain_own;
    BlockManager::ExtendBlockHashes(prompt, 3, chain_given.hashes, static_cast<int64_t>(rng() % 5));
    ASSERT_EQ(given.CachedPrefixTokens(prompt, chain_given.hashes), own.CachedPrefixTokens(prompt)) << iter;
    std::vector<BlockId> table_given, table_own;
    const auto n = static_cast<int64_t>(prompt.size());
    const auto got_given = given.AllocatePrompt(prompt, n, table_given, true, chain_given.hashes);
    const auto got_own = own.AllocatePrompt(prompt, n, table_own);
    ASSERT_EQ(got_given, got_own) << iter;
    ASSERT_EQ(table_given, table_own) << iter;
    if (!got_own) continue;
    given.CommitFullBlocks(prompt, n, table_given, chain_given);
    own.CommitFullBlocks(prompt, n, table_own, chain_own);
    EXPECT_EQ(chain_given.hashes, chain_own.hashes) << iter;
    live_given.push_back(std::move(table_given));
    live_own.push_back(std::move(table_own));
  }
  std::vector<uint64_t> a = given.CachedHashes(), b = own.CachedHashes();
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(given.stats().prefix_hits, own.stats().prefix_hits);
  EXPECT_GT(own.stats().prefix_hits, 0);
}

// Parallel sampling: shared blocks are reference counted; a write to a shared
// block copies it (the last holder writes in place), and every block is
// freed exactly once (a second Release aborts).
TEST(BlockManager, SharedBlocksCopyOnWriteAndFreeOnce) {
  BlockManager bm(12, 4);
  std::vector<BlockId> first;
  ASSERT_TRUE(bm.AllocatePrompt(Iota(10, 1), 10, first).has_value());  // blocks 0..2, the last partial
  std::vector<BlockId> a, b;
  bm.Share(first, a);
  bm.Share(first, b);
  for (BlockId id : first) EXPECT_EQ(bm.ref_count(id), 3);
  EXPECT_EQ(bm.num_free_blocks(), 9);

  // `a` writes position 10 (block 2, shared): it gets a copy.
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.PrepareWrite(a, 10, 11, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].index, 2);
  EXPECT_EQ(copies[0].src, first[2]);
  EXPECT_EQ(copies[0].dst, a[2]);
  EXPECT_NE(a[2], first[2]);
  EXPECT_EQ(bm.ref_count(first[2]), 2);
  EXPECT_EQ(bm.ref_count(a[2]), 1);
  // Writing it again copies nothing: it is a's alone.
  copies.clear();
  ASSERT_TRUE(bm.PrepareWrite(a, 11, 13, copies));  // and grows into a new block
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(a.size(), 4u);
  // `b` copies too; then `first`, the last holder, writes in place.
  ASSERT_TRUE(bm.PrepareWrite(b, 10, 11, copies));
  EXPECT_EQ(copies.size(), 1u);
  copies.clear();
  ASSERT_TRUE(bm.PrepareWrite(first, 10, 11, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.ref_count(first[2]), 1);
  // The full blocks stay shared until each holder frees them.
  EXPECT_EQ(bm.ref_count(first[0]), 3);
  bm.Free(a);
  bm.Free(first);
  EXPECT_EQ(bm.ref_count(b[0]), 1);
  bm.Free(b);
  EXPECT_EQ(bm.num_free_blocks(), 12);
}

TEST(BlockManager, PrepareWriteChangesNothingWithoutBlocksForTheCopyAndTheGrowth) {
  BlockManager bm(4, 4);
  std::vector<BlockId> first, other;
  ASSERT_TRUE(bm.AllocatePrompt(Iota(6, 1), 6, first).has_value());  // 2 blocks
  bm.Share(first, other);
  std::vector<BlockId> filler;
  ASSERT_TRUE(bm.Grow(filler, 4));  // 1 free block left
  std::vector<BlockCopy> copies;
  const std::vector<BlockId> before = other;
  // Position 7 needs a copy of block 1 and, for position 8, a new block: 2 > 1.
  EXPECT_FALSE(bm.PrepareWrite(other, 6, 9, copies));
  EXPECT_EQ(other, before);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.ref_count(first[1]), 2);
  EXPECT_EQ(bm.num_free_blocks(), 1);
  EXPECT_TRUE(bm.PrepareWrite(other, 6, 8, copies));  // the copy alone fits
  EXPECT_EQ(copies.size(), 1u);
}

}  // namespace
}  // namespace tpserve
