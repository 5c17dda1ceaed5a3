// Checks a StepMetadata (step.h) against the KV cache geometry before any op
// reads it, so that a caller's bad block id, slot or position is an
// InvalidArgument naming the sequence and the value, never memory corruption.
// Shared by every backend's BeginStep.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "backend/step.h"

namespace tpserve {

// OK when, for S = step.num_seqs() sequences and T = step.num_tokens() tokens:
// * positions and slot_mapping have T entries; query_start S + 1; seq_lens and
//   logits_indices S..T; block_tables S · max_blocks_per_seq;
// * query_start starts at 0, increases strictly (every sequence has a new
//   token) and ends at T; decode sequences have exactly one new token;
// * seq_lens[s] ≥ its new tokens and fits in max_blocks_per_seq blocks; the
//   first ceil(seq_lens[s] / block_size) block ids are in [0, num_blocks);
// * the n new tokens of a sequence are at positions seq_len - n .. seq_len - 1,
//   all below max_position (the RoPE table);
// * slots are -1 (padding) or in [0, num_blocks · block_size);
// * logits_indices has R in [S, T] entries, increasing; each sequence owns at
//   least one, all among its rows [query_start[s], query_start[s+1]), in
//   sequence order.
absl::Status ValidateStep(const StepMetadata& step, int64_t num_blocks, int32_t block_size,
                          int64_t max_position);

}  // namespace tpserve
