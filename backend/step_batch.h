// StepBatch: the one owner of a step's arrays (backend/step.h).
//
// Every producer of a forward step (the worker's step runner, the decode
// graphs' padding, the profile step, the CPU backend's copy of the current
// step, tests and benchmarks) builds it here, from one entry per sequence:
//
//   StepSequence{tokens, num_computed, block_table, num_logits}
//     tokens:       [n >= 1] the new tokens to compute this step
//     num_computed: tokens before them whose K/V are already in the cache
//                   (a cached prefix, an earlier prefill chunk, the decoded
//                   tokens so far)
//     block_table:  block ids; position p lives in block_table[p / block_size]
//     num_logits:   [1, n] logits rows: the last num_logits new tokens (1
//                   but for a sequence verifying a speculative proposal,
//                   backend/step.h)
//
// Build lays the sequences out in the given order. Token i of sequence s is at
// position num_computed + i, in slot block * block_size + p % block_size with
// block = block_table[p / block_size] (or -1 when the step does not store K/V);
// seq_lens[s] = num_computed + n, and the logits rows of s are its last
// num_logits tokens (logits_indices has one entry per row, in order).
// The prefill group is every sequence up to and including the last one with
// more than one new token; the rest are one-token decodes. The block table is
// [S, max_blocks_per_seq] with max_blocks_per_seq the longest block_table
// given (at least 1) and the unused entries -1.
//
//   seqs: {[a a a], 3, {7, 2}}  {[b], 0, {5}}  {[c c], 0, {4}}  {[d], 9, {1, 3, 6}}
//   (block_size 4)
//   num_prefill_seqs 3 (up to [c c]), num_decode_seqs 1
//   token_ids      a  a  a  b  c  c  d
//   positions      3  4  5  0  0  1  9
//   slot_mapping  31  8  9 20 16 17 25
//   query_start    0  3  4  6  7
//   seq_lens       6  1  2 10
//   block_tables  [7 2 -1] [5 -1 -1] [4 -1 -1] [1 3 6]
//   logits_indices 2  3  5  6
//
// A pure decode step is padded to a graph bucket by AssignPaddedDecode (the
// padding rows are described in worker/decode_graphs.h).
//
// view() points into the batch's own vectors and is rebuilt on every call, so
// a StepBatch copies and moves like any value; a view is valid until the
// batch is changed or destroyed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/step.h"

namespace tpserve {

// One sequence of a step (see above). The spans need only live through Build.
struct StepSequence {
  std::span<const int32_t> tokens;       // [n >= 1] new tokens
  int64_t num_computed = 0;              // tokens already in the KV cache
  std::span<const int32_t> block_table;  // [>= ceil((num_computed + n) / block_size)] block ids
  int32_t num_logits = 1;                // [1, n] logits rows: the last num_logits new tokens
};

class StepBatch {
 public:
  // Whether the new tokens' K and V are written to the cache. kNo: every slot
  // is -1 (a profile step on a throw-away cache, a test of the row ops).
  enum class StoreKv { kYes, kNo };

  // The arrays behind view(), as in StepMetadata (S sequences, T tokens).
  struct Arrays {
    int32_t num_prefill_seqs = 0;         // P: sequences 0..P-1 are in prefill
    int32_t num_decode_seqs = 0;          // S - P one-token decodes
    int32_t max_blocks_per_seq = 0;       // M: block-table columns
    std::vector<int32_t> token_ids;       // [T]
    std::vector<int32_t> positions;       // [T]
    std::vector<int64_t> slot_mapping;    // [T] -1: not stored
    std::vector<int32_t> query_start{0};  // [S + 1]
    std::vector<int32_t> seq_lens;        // [S]
    std::vector<int32_t> block_tables;    // [S, M] row-major, unused entries -1
    std::vector<int32_t> logits_indices;  // [R] R = sum of num_logits (S when every sequence has 1)
  };

  StepBatch() = default;  // the empty step: no sequences, query_start {0}

  // A batch of `seqs` laid out as above; INVALID_ARGUMENT as for Assign.
  static absl::StatusOr<StepBatch> Build(std::span<const StepSequence> seqs, int32_t block_size,
                                         StoreKv store = StoreKv::kYes);

  // Replaces the contents with `seqs` laid out as above (the vectors keep
  // their capacity). INVALID_ARGUMENT, naming the sequence and the field, when
  // block_size < 1, a sequence has no tokens or a negative num_computed, its
  // num_logits is outside [1, n], or its block_table is too short for
  // num_computed + n tokens; the batch is then empty.
  absl::Status Assign(std::span<const StepSequence> seqs, int32_t block_size, StoreKv store = StoreKv::kYes);

  // Replaces the contents with `step` (a pure decode of S <= bucket
  // sequences) padded to `bucket` decode rows and `max_blocks_per_seq` block
  // table columns: rows 0..S-1 are step's own (only the blocks their seq_len
  // uses are copied, the rest -1), rows S..bucket-1 are padding: token 0,
  // position 0, seq_len 1, slot -1, block-table row [0, -1, ...]. S may be 0
  // (all padding: a graph's warm-up step). INVALID_ARGUMENT when block_size
  // < 1, the step has prefill sequences, more than `bucket` sequences, arrays of the wrong
  // sizes, or a sequence whose seq_len needs more than max_blocks_per_seq
  // blocks of `block_size` tokens; the batch is then empty.
  absl::Status AssignPaddedDecode(const StepMetadata& step, int32_t bucket, int32_t max_blocks_per_seq,
                                  int32_t block_size);

  // Replaces the contents with `step` (any step) re-laid to
  // `max_blocks_per_seq` block-table columns: each row keeps the blocks its
  // seq_len uses, the rest -1; every other array as it is. What a
  // verification graph replays (worker/decode_graphs.h): the kernels read the
  // table with the captured stride and only below each context, so the
  // values they read are the step's own. INVALID_ARGUMENT when block_size <
  // 1, the arrays' sizes disagree with the sequence counts, or a sequence's
  // seq_len needs more blocks than either table has; the batch is then empty.
  absl::Status AssignWithColumns(const StepMetadata& step, int32_t max_blocks_per_seq, int32_t block_size);

  // Replaces the contents with a copy of `step`'s arrays as they are (no
  // checks: a backend validates before it copies).
  void CopyFrom(const StepMetadata& step);
  // Sequence s's block-table row into a_.block_tables of M columns: the blocks its
  // seq_len uses, the rest left as they are; INVALID_ARGUMENT (and Clear) when
  // they do not fit M or the step's columns. `kind` names the layout in the error.
  absl::Status CopyBlockRow(const StepMetadata& step, size_t s, size_t M, int32_t block_size, const char* kind);

  // The StepMetadata over this batch's arrays.
  StepMetadata view() const;

  const Arrays& arrays() const { return a_; }
  // For tests that break a valid step on purpose (the backends' validation
  // tests); view() follows the edits.
  Arrays& mutable_arrays() { return a_; }

  int32_t num_seqs() const { return a_.num_prefill_seqs + a_.num_decode_seqs; }
  int32_t num_tokens() const { return static_cast<int32_t>(a_.token_ids.size()); }

 private:
  void Clear();

  Arrays a_;
};

}  // namespace tpserve
