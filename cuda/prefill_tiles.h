// The tiling of the prefill attention kernel (cuda/prefill_attention.cuh):
// which query rows a thread block takes, which keys it walks, where causal
// masking is needed and where a key lives in the paged cache. Host and device
// code (C++17, no CUDA needed to include it), so the functions the kernel
// calls are tested on the CPU (tests/cuda/prefill_tiles_test.cc, label unit).
//
// A step's prefill sequences come first (backend/step.h): sequence s has
// n_s = query_start[s+1] − query_start[s] new rows at consecutive positions
// p_s .. p_s + n_s − 1, where p_s > 0 when a prefix is already cached (an
// earlier chunk or the prefix cache). Its rows are cut into query tiles of up
// to tile_rows rows; a tile never spans two sequences. Row r of a tile (at
// position pos_begin + r) attends to keys 0 .. pos_begin + r, so the tile
// reads keys [0, pos_begin + rows) in key tiles of key_tile keys:
//   * key tiles kt < FirstMaskedKeyTile: every key ≤ pos_begin, visible to
//     every row: no mask;
//   * the rest (the diagonal tiles, at most ceil(tile_rows / key_tile) + 1):
//     key j is visible to row r iff j ≤ pos_begin + r.
#pragma once

#include <cstdint>

#include "cuda/host_device.h"

namespace tpserve::cuda {

// Query rows per tile and keys per K/V tile of the prefill kernel.
inline constexpr int kPrefillTileRows = 64;
inline constexpr int kPrefillKeyTile = 64;

struct PrefillTile {
  int32_t row_begin = 0;  // first row of the step's [T, ...] arrays
  int32_t rows = 0;       // 1 .. tile_rows
  int32_t pos_begin = 0;  // position of the first row; row r is at pos_begin + r
  int32_t seq = 0;        // sequence (its block-table row)
};

// At most this many tiles for a step of max_tokens rows in max_seqs sequences:
// Σ ceil(n_s / tile_rows) ≤ floor(T / tile_rows) + S, and every tile has a row.
TPSERVE_HOST_DEVICE inline int64_t PrefillTileCapacity(int64_t max_tokens, int64_t max_seqs, int tile_rows) {
  const int64_t bound = max_tokens / tile_rows + max_seqs;
  return bound < max_tokens ? bound : max_tokens;
}

// Writes the tiles of sequences 0 .. num_prefill_seqs − 1 to out[0 .. n) and
// returns n, or −1 when n would exceed `capacity` (then out holds the first
// `capacity`). query_start: [num_prefill_seqs + 1] row offsets; positions: [T].
TPSERVE_HOST_DEVICE inline int64_t PlanPrefillTiles(const int32_t* query_start, const int32_t* positions,
                                                    int32_t num_prefill_seqs, int tile_rows, PrefillTile* out,
                                                    int64_t capacity) {
  int64_t n = 0;
  for (int32_t s = 0; s < num_prefill_seqs; ++s) {
    for (int32_t r = query_start[s]; r < query_start[s + 1]; r += tile_rows) {
      if (n == capacity) return -1;
      const int32_t left = query_start[s + 1] - r;
      out[n++] = PrefillTile{r, left < tile_rows ? left : tile_rows, positions[r], s};
    }
  }
  return n;
}

// Keys the tile reads: [0, TileContext) (the last row's position + 1).
TPSERVE_HOST_DEVICE inline int32_t TileContext(const PrefillTile& t) { return t.pos_begin + t.rows; }
TPSERVE_HOST_DEVICE inline int32_t KeyTiles(const PrefillTile& t, int key_tile) {
  return (TileContext(t) + key_tile - 1) / key_tile;
}
// Key tiles before this one hold only keys ≤ pos_begin (no mask needed).
TPSERVE_HOST_DEVICE inline int32_t FirstMaskedKeyTile(const PrefillTile& t, int key_tile) {
  return (t.pos_begin + 1) / key_tile;
}
// Causal visibility of key position `key` to the query at position `query_pos`.
TPSERVE_HOST_DEVICE inline bool KeyVisible(int32_t key, int32_t query_pos) { return key <= query_pos; }

// The paged-cache slot of key position `key` of the sequence whose
// block-table row is `table` (attention.cuh: [num_blocks, block_size, ...]).
TPSERVE_HOST_DEVICE inline int64_t KeySlot(const int32_t* table, int32_t key, int32_t block_size) {
  return int64_t{table[key / block_size]} * block_size + key % block_size;
}

}  // namespace tpserve::cuda
