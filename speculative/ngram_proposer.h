// Prompt lookup (n-gram) proposals for one sequence, without a draft model.
//
// The sequence's tokens (prompt, then output) come in through Append. Propose
// takes the last n tokens for n = prompt_lookup_max down to prompt_lookup_min,
// finds the most recent earlier place they occurred, and proposes the tokens
// that followed there (at most num_speculative_tokens; fewer when the match is
// near the end). The longest n that matched wins; no match, no proposal. This
// is vLLM's n-gram proposer (prompt_lookup_min / prompt_lookup_max /
// num_speculative_tokens), made incremental and bounded:
//
//   window:  the last max_history tokens (TokenWindow); older ones are
//            forgotten, so an occurrence must lie within the window
//   index:   hash of (n, n-gram) -> the last position where that n-gram ended
//            and was followed by a token, for every n in [min, max] and every
//            n-gram inside the window; an entry leaves when the n-gram's first
//            token leaves the window
//
// Costs: Append O(max^2) per token (max - min + 1 hashes of <= max tokens,
// inserts and the evicted position's erases); Propose O(max^2 + k) (one lookup
// per n, each hit checked token by token, so a hash collision never proposes).
// Neither depends on the sequence's length. Memory: 4 * max_history bytes of
// window plus at most max_history * (max - min + 1) index entries.
//
// Thread-compatible: one sequence's proposer is used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "speculative/token_window.h"

namespace tpserve::speculative {

struct NgramOptions {
  int32_t prompt_lookup_min = 2;        // shortest n-gram matched, >= 1
  int32_t prompt_lookup_max = 4;        // longest n-gram matched, >= min, <= 64
  int32_t num_speculative_tokens = 4;   // k: most tokens proposed per step, >= 1
  int64_t max_history = int64_t{1} << 16;  // tokens remembered, > prompt_lookup_max
};

// INVALID_ARGUMENT naming the field and its allowed range.
absl::Status ValidateNgramOptions(const NgramOptions& options);

class NgramProposer {
 public:
  // INVALID_ARGUMENT for options ValidateNgramOptions refuses.
  static absl::StatusOr<NgramProposer> Create(const NgramOptions& options);

  // Adds tokens at the end of the sequence.
  void Append(std::span<const int32_t> tokens);
  void Append(int32_t token);

  // Writes the proposal into out[0, r) and returns r <= min(out.size(), k):
  // the tokens that followed the most recent earlier occurrence of the longest
  // matching suffix (0 when none matches).
  int32_t Propose(std::span<int32_t> out) const;

  const NgramOptions& options() const { return options_; }
  int64_t num_tokens() const { return window_.end(); }  // appended in all
  size_t index_size() const { return index_.size(); }
  // Bytes held: the window and the index's slots.
  int64_t memory_bytes() const {
    return window_.memory_bytes() +
           static_cast<int64_t>(index_.capacity() * (sizeof(std::pair<const uint64_t, int64_t>) + 1));
  }
  const TokenWindow& window() const { return window_; }

 private:
  explicit NgramProposer(const NgramOptions& options)
      : options_(options), window_(options.max_history) {}
  // Hash of the n tokens ending at position `last` (inclusive).
  uint64_t Key(int64_t last, int32_t n) const;
  // Whether the n tokens ending at a and at b are equal.
  bool SameNgram(int64_t a, int64_t b, int32_t n) const;

  NgramOptions options_;
  TokenWindow window_;
  // Key(end, n) -> end, for n-grams ending at end < num_tokens() - 1 (each has
  // a following token) whose first token is inside the window.
  absl::flat_hash_map<uint64_t, int64_t> index_;
};

}  // namespace tpserve::speculative
