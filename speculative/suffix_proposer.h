// Suffix decoding for one sequence (Arctic Inference's suffix decoding, without
// its speculation trees: one chain of tokens per step), over two SuffixTries:
//
//   local:  every string of <= max_depth tokens inside the sequence's window
//           (its last max_history tokens of prompt and output), kept up to
//           date token by token
//   cache:  a SuffixCache shared by the server's sequences: every string of
//           <= its max_depth tokens of recent finished outputs (optional)
//
// A step's proposal: in each trie, the longest suffix of the sequence that
// occurred before with a following token is the match, at most
// max_depth - num_speculative_tokens tokens long (at least 1), so that the
// chain has room below the trie's depth; from it the chain of most frequent
// children is followed while the chain's probability (the product of
// count(child) / continuations(parent)) stays >= min_token_prob, for at most
//   min(num_speculative_tokens, floor(max_spec_factor * match_length + max_spec_offset))
// tokens (a longer match earns a longer proposal). The chain's score is the
// sum of its probabilities (its expected accepted length under those
// frequencies); the higher-scoring trie's chain is proposed (local on a tie).
//
// Costs per appended token, whatever the sequence's length: max_depth trie
// extensions (the suffixes of length 1..max_depth ending at the new token:
// `active_`), max_depth removals once the window is full (the strings that
// started at the token leaving it), max_depth lookups in the cache (each
// suffix's node there, if any: `cache_active_`). Propose: max_depth checks and
// one chain walk. Memory: the window, and at most max_history * max_depth
// local nodes (SuffixTrie's bytes per node).
//
// The cache's matches of a suffix are found when the suffix's tokens are
// appended; strings the cache learns later are found for suffixes that start
// after that. Thread-compatible, as is the SuffixCache: the sequences that
// share a cache are used by one thread at a time (rank 0's sampler thread).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "speculative/suffix_trie.h"
#include "speculative/token_window.h"

namespace tpserve::speculative {

struct SuffixOptions {
  int32_t max_depth = 24;              // longest string in the local trie, [2, 64]
  int32_t num_speculative_tokens = 8;  // most tokens proposed per step, [1, 64]
  double max_spec_factor = 1.0;        // adaptive length: tokens per matched token, >= 0
  double max_spec_offset = 0.0;        // adaptive length: added to it (may be negative)
  double min_token_prob = 0.1;         // a chain stops below this probability, [0, 1]
  int64_t max_history = 4096;          // the sequence's window, (max_depth, 2^30]
};

struct SuffixCacheOptions {
  int32_t max_depth = 24;                       // longest string in the cache, [2, 64]
  int64_t max_cached_sequences = 1024;          // outputs kept, >= 1
  int64_t max_cached_tokens = int64_t{1} << 18;  // their tokens in all, [1, 2^30]
};

absl::Status ValidateSuffixOptions(const SuffixOptions& options);
absl::Status ValidateSuffixCacheOptions(const SuffixCacheOptions& options);

// Recent outputs of the server, as one SuffixTrie. Adding an output past
// either limit evicts the oldest outputs first (their strings are removed);
// an output longer than max_cached_tokens keeps its last max_cached_tokens.
class SuffixCache {
 public:
  static absl::StatusOr<SuffixCache> Create(const SuffixCacheOptions& options);

  // Adds every string of <= max_depth tokens of `output`: O(len * max_depth).
  void AddOutput(std::span<const int32_t> output);

  const SuffixCacheOptions& options() const { return options_; }
  int64_t num_sequences() const { return static_cast<int64_t>(outputs_.size()); }
  int64_t num_tokens() const { return num_tokens_; }
  SuffixTrie& trie() { return trie_; }
  const SuffixTrie& trie() const { return trie_; }

 private:
  explicit SuffixCache(const SuffixCacheOptions& options) : options_(options), trie_(options.max_depth) {}
  void EvictOldest();

  SuffixCacheOptions options_;
  SuffixTrie trie_;
  std::deque<std::vector<int32_t>> outputs_;  // oldest first
  int64_t num_tokens_ = 0;                    // sum of outputs_' sizes
};

class SuffixProposer {
 public:
  struct Proposal {
    int32_t num_tokens = 0;    // written to out[0, num_tokens)
    int32_t match_length = 0;  // tokens of the sequence's suffix matched
    double score = 0;          // sum of the chain's probabilities
    bool from_cache = false;   // the chain came from the SuffixCache
  };

  // `cache` may be null (local matches only); it must outlive the proposer.
  static absl::StatusOr<SuffixProposer> Create(const SuffixOptions& options, SuffixCache* cache);

  void Append(std::span<const int32_t> tokens);
  void Append(int32_t token);

  // At most min(out.size(), the adaptive length) tokens into out.
  Proposal Propose(std::span<int32_t> out);

  const SuffixOptions& options() const { return options_; }
  int64_t num_tokens() const { return window_.end(); }
  const SuffixTrie& local_trie() const { return trie_; }
  // Bytes held by this sequence (its window and trie; the cache is shared).
  int64_t memory_bytes() const { return window_.memory_bytes() + trie_.memory_bytes(); }
  const TokenWindow& window() const { return window_; }

 private:
  SuffixProposer(const SuffixOptions& options, SuffixCache* cache);
  // The longest match length worth trying in a trie of `max_depth`.
  int64_t MaxMatch(int32_t max_depth, size_t room) const;
  // The chain from `node` of `trie` (matched over match_length tokens).
  Proposal Walk(SuffixTrie& trie, int32_t node, int32_t match_length, std::span<int32_t> out) const;

  SuffixOptions options_;
  SuffixCache* cache_;
  TokenWindow window_;
  SuffixTrie trie_;
  std::vector<int32_t> active_;                    // [max_depth] node of the last d + 1 tokens
  std::vector<SuffixTrie::NodeRef> cache_active_;  // [cache max_depth] the same in the cache
  std::vector<int32_t> scratch_;                   // [num_speculative_tokens] the other chain
};

}  // namespace tpserve::speculative
