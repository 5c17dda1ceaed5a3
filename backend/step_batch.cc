#include "backend/step_batch.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

template <typename... Parts>
absl::Status Invalid(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("StepBatch: ", parts...));
}

// Every sequence has tokens, a non-negative num_computed and blocks for all of them.
absl::Status CheckSequences(std::span<const StepSequence> seqs, int32_t block_size) {
  if (block_size < 1) return Invalid("block_size is ", block_size, "; it must be at least 1");
  for (size_t s = 0; s < seqs.size(); ++s) {
    const StepSequence& q = seqs[s];
    const int64_t n = std::ssize(q.tokens);
    if (n == 0) return Invalid("sequence ", s, " has no tokens; every sequence needs at least one new token");
    if (q.num_computed < 0) {
      return Invalid("sequence ", s, " has num_computed ", q.num_computed, "; it must be 0 or more");
    }
    if (q.num_logits < 1 || q.num_logits > n) {
      return Invalid("sequence ", s, " has num_logits ", q.num_logits, "; it must be in [1, ", n,
                     "] (its new tokens)");
    }
    const int64_t seq_len = q.num_computed + n;
    if (seq_len > std::numeric_limits<int32_t>::max()) {
      return Invalid("sequence ", s, " reaches ", seq_len, " tokens, beyond int32 positions");
    }
    if (seq_len > std::ssize(q.block_table) * block_size) {
      return Invalid("sequence ", s, " has num_computed ", q.num_computed, " + ", n, " new tokens = ", seq_len,
                     " but its block_table of ", q.block_table.size(), " blocks of ", block_size,
                     " tokens holds ", std::ssize(q.block_table) * block_size, "; pass the missing block ids");
    }
  }
  return absl::OkStatus();
}

// A pure decode of at most `bucket` sequences with arrays of the right sizes.
absl::Status CheckPaddable(const StepMetadata& step, int32_t bucket, int32_t block_size) {
  if (block_size < 1) return Invalid("block_size is ", block_size, "; it must be at least 1");
  const int32_t S = step.num_seqs();
  if (step.num_prefill_seqs != 0 || S > bucket || bucket < 1) {
    return Invalid("a step of ", step.num_prefill_seqs, " prefill and ", step.num_decode_seqs,
                   " decode sequences cannot be padded to ", bucket,
                   " decode rows (only pure decodes of at most that many)");
  }
  const size_t n = static_cast<size_t>(S);
  if (step.token_ids.size() != n || step.logits_indices.size() != n || step.seq_lens.size() != n || step.slot_mapping.size() != n ||
      step.positions.size() != n ||
      step.block_tables.size() != n * static_cast<size_t>(std::max(step.max_blocks_per_seq, 0))) {
    return Invalid("a decode step of ", S, " sequences needs one token, position, slot, seq_len and logits row each and ",
                   S, " block-table rows of max_blocks_per_seq = ", step.max_blocks_per_seq, " entries");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepBatch> StepBatch::Build(std::span<const StepSequence> seqs, int32_t block_size,
                                           StoreKv store) {
  StepBatch batch;
  TPSERVE_RETURN_IF_ERROR(batch.Assign(seqs, block_size, store));
  return batch;
}

void StepBatch::Clear() {
  a_.num_prefill_seqs = a_.num_decode_seqs = a_.max_blocks_per_seq = 0;
  a_.token_ids.clear();
  a_.positions.clear();
  a_.slot_mapping.clear();
  a_.query_start.assign(1, 0);
  a_.seq_lens.clear();
  a_.block_tables.clear();
  a_.logits_indices.clear();
}

absl::Status StepBatch::Assign(std::span<const StepSequence> seqs, int32_t block_size, StoreKv store) {
  Clear();
  TPSERVE_RETURN_IF_ERROR(CheckSequences(seqs, block_size));
  int32_t num_prefill = 0;  // up to and including the last multi-token sequence
  size_t columns = 1, num_tokens = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].tokens.size() > 1) num_prefill = static_cast<int32_t>(s) + 1;
    columns = std::max(columns, seqs[s].block_table.size());
    num_tokens += seqs[s].tokens.size();
  }
  a_.token_ids.reserve(num_tokens);
  a_.positions.reserve(num_tokens);
  a_.slot_mapping.reserve(num_tokens);
  a_.num_prefill_seqs = num_prefill;
  a_.num_decode_seqs = static_cast<int32_t>(seqs.size()) - num_prefill;
  a_.max_blocks_per_seq = static_cast<int32_t>(columns);
  a_.block_tables.assign(seqs.size() * columns, -1);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const StepSequence& q = seqs[s];
    for (size_t i = 0; i < q.tokens.size(); ++i) {
      const int64_t p = q.num_computed + static_cast<int64_t>(i);
      a_.token_ids.push_back(q.tokens[i]);
      a_.positions.push_back(static_cast<int32_t>(p));
      a_.slot_mapping.push_back(store == StoreKv::kNo
                                    ? -1
                                    : int64_t{q.block_table[static_cast<size_t>(p / block_size)]} * block_size +
                                          p % block_size);
    }
    a_.query_start.push_back(static_cast<int32_t>(a_.token_ids.size()));
    a_.seq_lens.push_back(static_cast<int32_t>(q.num_computed + std::ssize(q.tokens)));
    for (int32_t r = q.num_logits; r >= 1; --r) a_.logits_indices.push_back(a_.query_start.back() - r);
    std::copy(q.block_table.begin(), q.block_table.end(),
              a_.block_tables.begin() + static_cast<std::ptrdiff_t>(s * columns));
  }
  return absl::OkStatus();
}

absl::Status StepBatch::AssignPaddedDecode(const StepMetadata& step, int32_t bucket, int32_t max_blocks_per_seq,
                                           int32_t block_size) {
  Clear();
  TPSERVE_RETURN_IF_ERROR(CheckPaddable(step, bucket, block_size));
  const size_t B = static_cast<size_t>(bucket), M = static_cast<size_t>(std::max(max_blocks_per_seq, 0));
  a_.num_decode_seqs = bucket;
  a_.max_blocks_per_seq = max_blocks_per_seq;
  a_.token_ids.assign(B, 0);          // padding: token 0
  a_.positions.assign(B, 0);          //          at position 0
  a_.slot_mapping.assign(B, -1);      //          not stored
  a_.seq_lens.assign(B, 1);           //          attending to 1 token
  a_.block_tables.assign(B * M, -1);  //          in block 0 (set below)
  a_.query_start.resize(B + 1);
  a_.logits_indices.resize(B);
  for (size_t s = 0; s < B; ++s) {
    a_.query_start[s] = static_cast<int32_t>(s);
    a_.logits_indices[s] = static_cast<int32_t>(s);
    if (M > 0) a_.block_tables[s * M] = 0;
  }
  a_.query_start[B] = bucket;
  for (size_t s = 0; s < static_cast<size_t>(step.num_seqs()); ++s) {
    // Only the blocks the context uses (at least one: it replaces the
    // padding's block 0); the rest stay -1.
    if (absl::Status st = CopyBlockRow(step, s, M, block_size, "padded"); !st.ok()) return st;
    a_.token_ids[s] = step.token_ids[s];
    a_.positions[s] = step.positions[s];
    a_.slot_mapping[s] = step.slot_mapping[s];
    a_.seq_lens[s] = step.seq_lens[s];
  }
  return absl::OkStatus();
}

absl::Status StepBatch::AssignWithColumns(const StepMetadata& step, int32_t max_blocks_per_seq,
                                          int32_t block_size) {
  Clear();
  if (block_size < 1) return Invalid("block_size is ", block_size, "; it must be at least 1");
  const size_t S = static_cast<size_t>(std::max(step.num_seqs(), 0));
  if (step.query_start.size() != S + 1 || step.seq_lens.size() != S ||
      step.block_tables.size() != S * static_cast<size_t>(std::max(step.max_blocks_per_seq, 0))) {
    return Invalid("a step of ", S, " sequences needs ", S + 1, " query_start entries, ", S, " seq_lens and ", S,
                   " block-table rows of max_blocks_per_seq = ", step.max_blocks_per_seq, " entries");
  }
  CopyFrom(step);
  const size_t M = static_cast<size_t>(std::max(max_blocks_per_seq, 0));
  a_.max_blocks_per_seq = max_blocks_per_seq;
  a_.block_tables.assign(S * M, -1);
  for (size_t s = 0; s < S; ++s) {
    if (absl::Status st = CopyBlockRow(step, s, M, block_size, "re-laid"); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status StepBatch::CopyBlockRow(const StepMetadata& step, size_t s, size_t M, int32_t block_size,
                                     const char* kind) {
  const int32_t seq_len = step.seq_lens[s];
  const int64_t used = (int64_t{seq_len} + block_size - 1) / block_size;
  if (seq_len < 1 || used > static_cast<int64_t>(M) || used > step.max_blocks_per_seq) {
    Clear();
    return Invalid("sequence ", s, " has seq_len ", seq_len, ", which needs ", used, " blocks of ", block_size,
                   " tokens; the step has ", step.max_blocks_per_seq, " block-table columns and the ", kind,
                   " step ", M);
  }
  const auto row = step.block_tables.begin() + static_cast<std::ptrdiff_t>(s) * step.max_blocks_per_seq;
  std::copy_n(row, used, a_.block_tables.begin() + static_cast<std::ptrdiff_t>(s * M));
  return absl::OkStatus();
}

void StepBatch::CopyFrom(const StepMetadata& step) {
  a_.num_prefill_seqs = step.num_prefill_seqs;
  a_.num_decode_seqs = step.num_decode_seqs;
  a_.max_blocks_per_seq = step.max_blocks_per_seq;
  a_.token_ids.assign(step.token_ids.begin(), step.token_ids.end());
  a_.positions.assign(step.positions.begin(), step.positions.end());
  a_.slot_mapping.assign(step.slot_mapping.begin(), step.slot_mapping.end());
  a_.query_start.assign(step.query_start.begin(), step.query_start.end());
  a_.seq_lens.assign(step.seq_lens.begin(), step.seq_lens.end());
  a_.block_tables.assign(step.block_tables.begin(), step.block_tables.end());
  a_.logits_indices.assign(step.logits_indices.begin(), step.logits_indices.end());
}

StepMetadata StepBatch::view() const {
  return StepMetadata{.num_prefill_seqs = a_.num_prefill_seqs,
                      .num_decode_seqs = a_.num_decode_seqs,
                      .token_ids = a_.token_ids,
                      .positions = a_.positions,
                      .slot_mapping = a_.slot_mapping,
                      .query_start = a_.query_start,
                      .seq_lens = a_.seq_lens,
                      .block_tables = a_.block_tables,
                      .max_blocks_per_seq = a_.max_blocks_per_seq,
                      .logits_indices = a_.logits_indices};
}

}  // namespace tpserve
