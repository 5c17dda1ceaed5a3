// The description of one forward step, as the model hands it to the backend.
//
// A step is a mixed batch of S sequences, T new tokens in all. Sequences in
// prefill (one or more new tokens; their earlier tokens may already be in the
// KV cache, e.g. a cached prefix or an earlier chunk) come first, then sequences
// in decode (exactly one new token each):
//
//   seq:            0 (prefill)   1 (prefill)   2 (decode)  3 (decode)
//   new tokens:     [t t t t]     [t t]         [t]         [t]
//   query_start:    0             4             6           7          8 (= T)
//
// Paged KV cache (per worker and layer; docs/architecture.md, "KV cache"):
//   K, V: [num_blocks, block_size, local_kv_heads, head_dim]
// Token position p of sequence s lives in block block_tables[s][p / block_size]
// at offset p % block_size; its slot is block * block_size + offset.
// Block ids always come from the caller (scheduler/block_manager.h, in the
// coordinator or the offline engine); the backend checks them against num_blocks.
#pragma once

#include <cstdint>
#include <span>

namespace tpserve {

struct StepMetadata {
  int32_t num_prefill_seqs = 0;            // P: sequences 0..P-1 are in prefill
  int32_t num_decode_seqs = 0;             // sequences P..S-1 have one new token each
  std::span<const int32_t> token_ids;      // [T] new tokens, sequence after sequence
  std::span<const int32_t> positions;      // [T] position of each new token in its sequence
  std::span<const int64_t> slot_mapping;   // [T] KV slot of each new token; -1 = padding, not stored
  std::span<const int32_t> query_start;    // [S + 1] offsets of each sequence's new tokens in [0, T]
  std::span<const int32_t> seq_lens;       // [S] context length after this step (cached + new)
  std::span<const int32_t> block_tables;   // [S, max_blocks_per_seq] block ids, row-major; unused entries -1
  int32_t max_blocks_per_seq = 0;
  std::span<const int32_t> logits_indices; // [S] row in [0, T) whose hidden state reaches the LM head
                                           //     (the last new token of each sequence)

  int32_t num_seqs() const { return num_prefill_seqs + num_decode_seqs; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

}  // namespace tpserve
