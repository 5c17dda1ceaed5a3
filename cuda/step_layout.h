// Where CudaBackend::BeginStep puts a step's metadata (backend/step.h) in its
// one host staging buffer and its one device buffer, and which bytes of it a
// step copies. Plain C++, tested on the CPU (tests/cuda/step_layout_test.cc).
//
// The arrays are laid out for the step's own T tokens and S sequences
// (StepLayout(T, S, stride)), so what a step copies follows the step: a
// batch-1 decode step copies 40 bytes of token and sequence arrays, not the
// max_tokens x 20 + max_seqs x 4 bytes of the capacity (41 KB at the serving
// default). A reserved backend's buffers hold the capacity's layout, the
// largest (every offset and the total grow with T and S), so any step's fits;
// the arrays' addresses then depend on (T, S) and the stride only, which is
// what a CUDA graph captures: a decode graph's bucket fixes T = S, and its
// replays' steps have the captured sizes (Backend::BeginCapture's contract).
//
// The block table keeps its row stride, max_blocks_per_seq columns (a reserved
// backend uses the capacity's, so the CUDA graphs captured over it read every
// step with the same stride), but a step uploads only the columns its
// sequences use: max over s of ceil(seq_lens[s] / block_size). At batch 256
// with a 40,960-token model and 16-token blocks the whole table is 2.6 MB,
// while a step whose contexts are 1,000 tokens uses 63 of its 2,560 columns.
// The columns beyond hold whatever an earlier step left there (another
// step's arrays, when its sizes differed): every kernel reads only the
// columns below its sequence's context (positions < seq_len, which
// ValidateStep holds), never the -1 padding of StepMetadata's host table.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "cuda/prefill_tiles.h"

namespace tpserve::cuda {

// Byte offsets of the packed metadata for T tokens, S sequences,
// max_blocks_per_seq block-table columns (the table's stride) and R logits
// rows (0: one per sequence; more when sequences verify speculative
// proposals, backend/step.h; a reserved backend allows R <= its max_seqs, so
// the capacity's layout still holds the step's). The block table comes after the
// per-token and per-sequence arrays, so that the first copy is one prefix
// (or one prefix and one 2D copy of the used columns); the prefill attention's
// query tiles (cuda/prefill_tiles.h) come last, in a second copy that only
// steps with prefill rows make.
struct StepLayout {
  size_t slots = 0, ids = 0, pos = 0, seq = 0, logits = 0, tables = 0, tiles = 0, total = 0;  // byte offsets
  int64_t max_tiles = 0;  // the most prefill tiles a step of T tokens and S sequences has
  StepLayout(size_t T, size_t S, size_t max_blocks_per_seq, size_t R = 0) {
    auto round8 = [](size_t b) { return (b + 7) / 8 * 8; };
    slots = 0;                                      // [T] int64
    ids = slots + round8(T * sizeof(int64_t));      // [T] int32
    pos = ids + round8(T * sizeof(int32_t));        // [T] int32
    seq = pos + round8(T * sizeof(int32_t));        // [T] int32 sequence of each token
    logits = seq + round8(T * sizeof(int32_t));     // [max(S, R)] int32
    tables = logits + round8(std::max(S, R) * sizeof(int32_t));  // [S, max_blocks_per_seq] int32
    tiles = tables + round8(S * max_blocks_per_seq * sizeof(int32_t));  // [max_tiles] PrefillTile
    max_tiles = PrefillTileCapacity(static_cast<int64_t>(T), static_cast<int64_t>(S), kPrefillTileRows);
    total = std::max<size_t>(tiles + static_cast<size_t>(max_tiles) * sizeof(PrefillTile), 8);
  }
};

// The block-table columns the kernels of a step read: max over the sequences
// of ceil(seq_len / block_size); 0 without sequences. block_size >= 1.
inline size_t UsedBlockColumns(std::span<const int32_t> seq_lens, int32_t block_size) {
  int64_t most = 0;
  for (int32_t len : seq_lens) most = std::max<int64_t>(most, (int64_t{len} + block_size - 1) / block_size);
  return static_cast<size_t>(most);
}

// What a step copies: bytes [0, prefix_bytes) of the layout as they are (the
// token arrays and logits indices), then the first `used_columns` of each of
// the S block-table rows. On the host the used columns are packed row after
// row at layout.tables (row_bytes apart); on the device each row starts
// pitch_bytes after the one before (the table's stride). When every column is
// used the two pitches agree and the whole thing is one contiguous copy.
struct StepUpload {
  size_t prefix_bytes = 0;  // layout.tables
  size_t rows = 0;          // S
  size_t row_bytes = 0;     // used_columns * 4: copied per row, the host pitch
  size_t pitch_bytes = 0;   // max_blocks_per_seq * 4: the device pitch
  bool contiguous() const { return row_bytes == pitch_bytes; }
  size_t bytes() const { return prefix_bytes + rows * row_bytes; }  // what crosses the bus
};

inline StepUpload PlanStepUpload(const StepLayout& layout, size_t S, size_t max_blocks_per_seq,
                                 size_t used_columns) {
  StepUpload u;
  u.prefix_bytes = layout.tables;
  u.rows = S;
  u.row_bytes = std::min(used_columns, max_blocks_per_seq) * sizeof(int32_t);
  u.pitch_bytes = max_blocks_per_seq * sizeof(int32_t);
  return u;
}

}  // namespace tpserve::cuda
