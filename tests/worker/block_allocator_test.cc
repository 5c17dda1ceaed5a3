#include "worker/block_allocator.h"

#include <algorithm>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(BlockAllocatorTest, BlocksForRoundsUp) {
  EXPECT_EQ(BlockAllocator::BlocksFor(0, 16), 0);
  EXPECT_EQ(BlockAllocator::BlocksFor(1, 16), 1);
  EXPECT_EQ(BlockAllocator::BlocksFor(16, 16), 1);
  EXPECT_EQ(BlockAllocator::BlocksFor(17, 16), 2);
  EXPECT_EQ(BlockAllocator::BlocksFor(19, 3), 7);
}

TEST(BlockAllocatorTest, HandsOutDistinctIdsUntilExhausted) {
  BlockAllocator alloc(7);
  auto a = alloc.Allocate(3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2}));
  auto b = alloc.Allocate(4);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(alloc.num_free(), 0);
  auto c = alloc.Allocate(1);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("0 of 7 free"), std::string::npos) << c.status();
  ASSERT_TRUE(alloc.Free(*a).ok());
  EXPECT_EQ(alloc.num_free(), 3);
  auto d = alloc.Allocate(3);
  ASSERT_TRUE(d.ok());
  std::vector<int32_t> sorted = *d;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int32_t>{0, 1, 2}));
}

TEST(BlockAllocatorTest, FailedAllocationTakesNothing) {
  BlockAllocator alloc(5);
  ASSERT_TRUE(alloc.Allocate(2).ok());
  EXPECT_FALSE(alloc.Allocate(4).ok());
  EXPECT_EQ(alloc.num_free(), 3);
}

TEST(BlockAllocatorTest, DoubleFreeAndOutOfRangeAreErrorsThatFreeNothing) {
  BlockAllocator alloc(4);
  auto a = alloc.Allocate(2);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(alloc.Free({(*a)[0], (*a)[0]}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc.Free({(*a)[0], 9}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc.Free({-1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc.Free({3}).code(), absl::StatusCode::kInvalidArgument);  // never allocated
  EXPECT_EQ(alloc.num_free(), 2);
  ASSERT_TRUE(alloc.Free(*a).ok());
  EXPECT_EQ(alloc.Free(*a).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockAllocatorTest, RandomAllocateFreeKeepsIdsUnique) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  BlockAllocator alloc(37);
  std::vector<std::vector<int32_t>> held;
  for (int i = 0; i < 500; ++i) {
    if (held.empty() || rng() % 2) {
      auto got = alloc.Allocate(static_cast<int64_t>(rng() % 6));
      if (got.ok()) held.push_back(*got);
    } else {
      const size_t k = rng() % held.size();
      ASSERT_TRUE(alloc.Free(held[k]).ok());
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    }
    std::set<int32_t> ids;
    size_t count = 0;
    for (const auto& h : held) {
      ids.insert(h.begin(), h.end());
      count += h.size();
    }
    ASSERT_EQ(ids.size(), count);
    ASSERT_EQ(alloc.num_free() + static_cast<int64_t>(count), 37);
  }
}

}  // namespace
}  // namespace tpserve
