// The tiling math of the prefill attention kernel (cuda/prefill_tiles.h), the
// very functions the kernel and CudaBackend::BeginStep call, on the CPU:
// tiles cover every prefill row once and never span sequences, the capacity
// bound holds, the key-tile walk covers exactly the causal keys, and the
// unmasked key tiles are exactly those every row of the tile sees whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/prefill_tiles.h"
#include "tests/testing/seed.h"

namespace tpserve::cuda {
namespace {

struct Steps {
  std::vector<int32_t> query_start{0}, positions;
  void Add(int32_t cached, int32_t n) {
    for (int32_t i = 0; i < n; ++i) positions.push_back(cached + i);
    query_start.push_back(query_start.back() + n);
  }
  int32_t seqs() const { return static_cast<int32_t>(query_start.size()) - 1; }
};

// Checks the plan of `st`'s first num_prefill sequences with tile_rows rows.
void CheckPlan(const Steps& st, int32_t num_prefill, int tile_rows) {
  const int64_t T = static_cast<int64_t>(st.positions.size());
  const int64_t cap = PrefillTileCapacity(T, st.seqs(), tile_rows);
  std::vector<PrefillTile> tiles(static_cast<size_t>(cap) + 1);
  const int64_t n =
      PlanPrefillTiles(st.query_start.data(), st.positions.data(), num_prefill, tile_rows, tiles.data(), cap);
  ASSERT_GE(n, 0) << "the capacity bound " << cap << " is too small";
  std::vector<int> covered(static_cast<size_t>(T), 0);
  for (int64_t i = 0; i < n; ++i) {
    const PrefillTile& t = tiles[static_cast<size_t>(i)];
    ASSERT_GE(t.rows, 1);
    ASSERT_LE(t.rows, tile_rows);
    ASSERT_GE(t.seq, 0);
    ASSERT_LT(t.seq, num_prefill);
    EXPECT_GE(t.row_begin, st.query_start[t.seq]);
    EXPECT_LE(t.row_begin + t.rows, st.query_start[t.seq + 1]) << "tile " << i << " spans two sequences";
    EXPECT_EQ(t.pos_begin, st.positions[t.row_begin]);
    for (int32_t r = 0; r < t.rows; ++r) ++covered[t.row_begin + r];
    // Keys: [0, last row's position], walked whole by the key tiles.
    EXPECT_EQ(TileContext(t), st.positions[t.row_begin + t.rows - 1] + 1);
    for (int key_tile : {16, 64}) {
      const int32_t kts = KeyTiles(t, key_tile);
      EXPECT_GE(kts * key_tile, TileContext(t));
      EXPECT_LT((kts - 1) * key_tile, TileContext(t));
      for (int32_t kt = 0; kt < kts; ++kt) {
        bool all_visible = true;
        for (int32_t key = kt * key_tile; key < (kt + 1) * key_tile; ++key) {
          for (int32_t r = 0; r < t.rows; ++r) all_visible = all_visible && KeyVisible(key, t.pos_begin + r);
        }
        EXPECT_EQ(kt < FirstMaskedKeyTile(t, key_tile), all_visible)
            << "tile " << i << " (pos_begin " << t.pos_begin << ", rows " << t.rows << ") key tile " << kt;
      }
    }
  }
  const int32_t prefill_rows = st.query_start[num_prefill];
  for (int64_t r = 0; r < T; ++r) EXPECT_EQ(covered[r], r < prefill_rows ? 1 : 0) << "row " << r;
  // One tile short of the plan is reported, not overrun.
  if (n > 0) {
    EXPECT_EQ(PlanPrefillTiles(st.query_start.data(), st.positions.data(), num_prefill, tile_rows, tiles.data(), n - 1),
              -1);
  }
}

TEST(PrefillTilesTest, VariableLengthsCachedPrefixesAndDecodeRows) {
  Steps st;
  st.Add(0, 1);     // a one-token prompt
  st.Add(0, 64);    // exactly one tile
  st.Add(0, 65);    // one row into a second tile
  st.Add(30, 100);  // a cached prefix: the first tile's diagonal crosses a key-tile boundary
  st.Add(128, 64);  // a cached prefix on a key-tile boundary
  st.Add(7, 1);     // decodes: not tiled
  st.Add(500, 1);
  CheckPlan(st, 5, 64);
  CheckPlan(st, 5, 16);
  CheckPlan(st, 0, 64);  // decode-only: no tiles
}

TEST(PrefillTilesTest, RandomStepsStayWithinTheCapacityBound) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(::testing::Message() << "TPSERVE_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  for (int iter = 0; iter < 200; ++iter) {
    Steps st;
    const int seqs = 1 + static_cast<int>(rng() % 9);
    for (int s = 0; s < seqs; ++s) st.Add(static_cast<int32_t>(rng() % 300), 1 + static_cast<int32_t>(rng() % 200));
    CheckPlan(st, 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(seqs)), 64);
    if (HasFatalFailure()) return;
  }
}

TEST(PrefillTilesTest, KeySlotWalksTheBlockTable) {
  const int32_t table[] = {7, 2, 9};
  EXPECT_EQ(KeySlot(table, 0, 16), 7 * 16);
  EXPECT_EQ(KeySlot(table, 15, 16), 7 * 16 + 15);
  EXPECT_EQ(KeySlot(table, 16, 16), 2 * 16);
  EXPECT_EQ(KeySlot(table, 40, 16), 9 * 16 + 8);
}

}  // namespace
}  // namespace tpserve::cuda
