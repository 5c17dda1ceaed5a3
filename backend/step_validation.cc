#include "backend/step_validation.h"

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

absl::Status Invalid(auto&&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("BeginStep: ", parts...));
}

absl::Status CheckSizes(const StepMetadata& step) {
  const int64_t S = step.num_seqs(), T = step.num_tokens();
  auto check = [](const char* name, size_t got, int64_t want, const char* what) {
    if (static_cast<int64_t>(got) == want) return absl::OkStatus();
    return Invalid(name, " has ", got, " entries; it needs ", want, " (", what, ")");
  };
  if (auto s = check("positions", step.positions.size(), T, "one per new token"); !s.ok()) return s;
  if (auto s = check("slot_mapping", step.slot_mapping.size(), T, "one per new token"); !s.ok()) {
    return s;
  }
  if (auto s = check("query_start", step.query_start.size(), S + 1, "number of sequences + 1");
      !s.ok()) {
    return s;
  }
  if (auto s = check("seq_lens", step.seq_lens.size(), S, "one per sequence"); !s.ok()) return s;
  const int64_t R = std::ssize(step.logits_indices);
  if (R < S || R > T) {
    return Invalid("logits_indices has ", R, " entries; it needs ", S, " to ", T,
                   " (at least one row per sequence, at most one per new token)");
  }
  return check("block_tables", step.block_tables.size(), S * int64_t{step.max_blocks_per_seq},
               "sequences x max_blocks_per_seq");
}

// The new tokens of sequence s: rows [begin, end) of the step.
absl::Status CheckSequence(const StepMetadata& step, int32_t s, int64_t num_blocks,
                           int32_t block_size, int64_t max_position) {
  const int64_t num_slots = num_blocks * block_size;
  const bool decode = s >= step.num_prefill_seqs;
  const char* kind = decode ? " (decode)" : " (prefill)";
  const int32_t begin = step.query_start[s], end = step.query_start[s + 1];
  const int32_t n = end - begin;  // > 0: ValidateStep checked query_start first
  if (decode && n != 1) {
    return Invalid("sequence ", s, " (decode) has ", n, " new tokens; a decode sequence has "
                   "exactly 1 (put sequences with more in prefill, before the decodes)");
  }
  const int32_t seq_len = step.seq_lens[s];
  if (seq_len < n) {
    return Invalid("sequence ", s, kind, ": seq_lens = ", seq_len, " is smaller than its ", n,
                   " new tokens; seq_lens counts cached plus new tokens");
  }
  const int64_t blocks_used = (int64_t{seq_len} + block_size - 1) / block_size;
  if (blocks_used > step.max_blocks_per_seq) {
    return Invalid("sequence ", s, kind, ": seq_lens = ", seq_len, " needs ", blocks_used,
                   " blocks of ", block_size, " tokens, but block_tables has max_blocks_per_seq = ",
                   step.max_blocks_per_seq);
  }
  for (int64_t b = 0; b < blocks_used; ++b) {
    const int32_t id = step.block_tables[s * int64_t{step.max_blocks_per_seq} + b];
    if (id < 0 || id >= num_blocks) {
      return Invalid("sequence ", s, kind, ": block_tables entry ", b, " is block id ", id,
                     ", outside the KV cache's [0, ", num_blocks, ") blocks");
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    const int32_t t = begin + i, pos = step.positions[t];
    if (pos < 0 || pos >= max_position) {
      return Invalid("sequence ", s, kind, ": token ", t, " has position ", pos,
                     ", outside [0, ", max_position, ") (the model's max_position_embeddings)");
    }
    if (pos != seq_len - n + i) {
      return Invalid("sequence ", s, kind, ": token ", t, " has position ", pos, " but with ",
                     seq_len, " tokens of context and ", n, " new ones it must be ",
                     seq_len - n + i);
    }
    const int64_t slot = step.slot_mapping[t];
    if (slot != -1 && (slot < 0 || slot >= num_slots)) {
      return Invalid("sequence ", s, kind, ": token ", t, " has slot ", slot, ", outside [0, ",
                     num_slots, ") = ", num_blocks, " blocks x ", block_size,
                     " tokens (use -1 for padding)");
    }
  }
  return absl::OkStatus();
}

// Every sequence owns a run of logits_indices, increasing, within its rows.
absl::Status CheckLogitsRows(const StepMetadata& step) {
  const std::span<const int32_t> li = step.logits_indices;
  size_t j = 0;
  for (int32_t s = 0; s < step.num_seqs(); ++s) {
    const int32_t begin = step.query_start[s], end = step.query_start[s + 1];
    const char* kind = s >= step.num_prefill_seqs ? " (decode)" : " (prefill)";
    if (j >= li.size() || li[j] < begin || li[j] >= end) {
      return Invalid("sequence ", s, kind, ": logits_indices = ", j < li.size() ? li[j] : -1, " (entry ", j,
                     ") is not one of its rows [", begin, ", ", end,
                     "); each sequence needs its logits rows, in sequence order");
    }
    for (++j; j < li.size() && li[j] < end; ++j) {
      if (li[j] <= li[j - 1]) {
        return Invalid("sequence ", s, kind, ": logits_indices entry ", j, " = ", li[j], " follows ", li[j - 1],
                       "; a sequence's logits rows must increase");
      }
    }
  }
  if (j != li.size()) {
    return Invalid("logits_indices entry ", j, " = ", li[j], " belongs to no sequence after the last one's rows");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                          int64_t max_position) {
  if (step.num_prefill_seqs < 0 || step.num_decode_seqs < 0) {
    return Invalid("num_prefill_seqs = ", step.num_prefill_seqs, " and num_decode_seqs = ",
                   step.num_decode_seqs, " must not be negative");
  }
  if (block_size <= 0 || num_blocks < 0 || step.max_blocks_per_seq < 0) {
    return Invalid("block_size = ", block_size, ", num_blocks = ", num_blocks,
                   ", max_blocks_per_seq = ", step.max_blocks_per_seq,
                   "; block_size must be positive and the counts not negative");
  }
  if (auto s = CheckSizes(step); !s.ok()) return s;
  const int32_t S = step.num_seqs(), T = step.num_tokens();
  if (step.query_start[0] != 0) {
    return Invalid("query_start[0] = ", step.query_start[0], "; it must be 0");
  }
  if (step.query_start[S] != T) {
    return Invalid("query_start[", S, "] = ", step.query_start[S],
                   " must equal the number of new tokens, ", T);
  }
  for (int32_t s = 0; s < S; ++s) {
    const int32_t begin = step.query_start[s], end = step.query_start[s + 1];
    if (end <= begin) {
      return Invalid("sequence ", s, ": query_start[", s + 1, "] = ", end,
                     " is not greater than query_start[", s, "] = ", begin,
                     "; offsets must increase, every sequence has at least one new token");
    }
  }
  for (int32_t s = 0; s < S; ++s) {
    if (auto st = CheckSequence(step, s, num_blocks, block_size, max_position); !st.ok()) {
      return st;
    }
  }
  return CheckLogitsRows(step);
}

}  // namespace tpserve
