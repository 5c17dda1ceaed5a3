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
//
// Logits rows: each sequence has at least one row whose hidden state reaches
// the LM head, usually its last new token. A sequence verifying a speculative
// proposal (issue 27) is a multi-token sequence in the prefill group whose new
// tokens are its last sampled token and the k proposed ones at the following
// positions; its logits rows are all k + 1 of them, so one forward gives the
// target's logits after each proposed token:
//
//   seq:            0 (prefill)   1 (verify, k = 2)   2 (decode)
//   new tokens:     [t t t t]     [s p p]             [t]
//   logits_indices: 3             4 5 6               7      (R = 5 rows)
//
// The CPU backend computes every row alone ("The CPU backend's numerics"), so
// row 5 holds the bits a one-token step at that position would. The CUDA
// backend follows it to bf16 rounding; reserved (its decode graphs), it takes
// at most its capacity's max_seqs rows.
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
  std::span<const int32_t> logits_indices; // [R >= S] rows in [0, T) whose hidden states reach the LM
                                           //     head, increasing, each sequence owning at least one
                                           //     (usually its last new token; see above)

  int32_t num_seqs() const { return num_prefill_seqs + num_decode_seqs; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_logits_rows() const { return static_cast<int32_t>(logits_indices.size()); }
};

}  // namespace tpserve
