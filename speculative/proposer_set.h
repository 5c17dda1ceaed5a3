// ProposerSet: the proposers of every speculating sequence of one engine, and
// the server-wide SuffixCache they share (suffix decoding), made from one
// ProposerConfig (docs/architecture.md, "Speculative decoding").
//
// Each sequence's proposer is fed the sequence's tokens as they become known,
// in runs of any size (a prompt, the accepted tokens of a verification); a
// sequence whose tokens must be replayed (preemption by recompute) is
// removed and added again and then fed from its first token. A sequence that
// ends hands its output to the SuffixCache (Remove), so later sequences find
// continuations in the server's recent outputs.
//
// Rank 0 holds one beside its sampler (worker/step_runner.h). Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "speculative/proposer.h"

namespace tpserve::speculative {

struct ProposerConfig {
  std::string method = "ngram";        // "ngram" (prompt lookup), "suffix" or "off" (no set)
  int32_t num_speculative_tokens = 4;  // k: most tokens proposed per sequence and step, [1, 16]
  int32_t prompt_lookup_min = 2;       // ngram: shortest n-gram matched
  int32_t prompt_lookup_max = 4;       // ngram: longest
};

// INVALID_ARGUMENT naming the coordinator's flag (--speculative-method,
// --num-speculative-tokens) or the n-gram option, and the fix. "off" is
// valid here (its k is checked like the others'); ProposerSet refuses it.
absl::Status ValidateProposerConfig(const ProposerConfig& config);

// Makes one sequence's proposer (tests: a scripted one; see ProposerSet::Create).
using ProposerFactory = std::function<std::unique_ptr<Proposer>(uint64_t seq_id)>;

class ProposerSet {
 public:
  // INVALID_ARGUMENT as ValidateProposerConfig, and for method "off".
  // `factory` (tests: proposals they choose, right and wrong) makes each
  // sequence's proposer instead of the config's method, which then only
  // bounds k; the suffix cache is not used.
  static absl::StatusOr<ProposerSet> Create(const ProposerConfig& config, ProposerFactory factory = nullptr);

  // Sequence `seq_id` speculates from now on: a fresh proposer, fed nothing
  // yet. Adding a held id replaces its proposer (a recompute starts over).
  void Add(uint64_t seq_id);
  // It ended: its proposer goes and, when `output` is not empty and the
  // method is suffix, `output` joins the SuffixCache. Unknown ids are ignored.
  void Remove(uint64_t seq_id, std::span<const int32_t> output = {});
  // `tokens` follow those `seq_id` was fed (the prompt, a recompute's
  // output, each step's accepted tokens). Unknown ids are ignored.
  void Append(uint64_t seq_id, std::span<const int32_t> tokens);
  // Up to out.size() (at most k) tokens to follow what `seq_id` was fed; how
  // many were written (0 for an unknown id or no match).
  int32_t Propose(uint64_t seq_id, std::span<int32_t> out);

  bool contains(uint64_t seq_id) const { return seqs_.contains(seq_id); }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  // Tokens fed to `seq_id`'s proposer (0 when unknown).
  int64_t fed(uint64_t seq_id) const;
  const ProposerConfig& config() const { return config_; }
  // The suffix method's recent outputs (null for ngram).
  const SuffixCache* suffix_cache() const { return suffix_cache_.get(); }

 private:
  struct State {
    std::unique_ptr<Proposer> proposer;
    int64_t fed = 0;  // tokens of the sequence appended to the proposer
  };
  explicit ProposerSet(const ProposerConfig& config) : config_(config) {}
  absl::StatusOr<std::unique_ptr<Proposer>> MakeOne(uint64_t seq_id);

  ProposerConfig config_;
  ProposerFactory factory_;
  // Method suffix; a unique_ptr so the proposers' pointers to it survive a move of the set.
  std::unique_ptr<SuffixCache> suffix_cache_;
  absl::flat_hash_map<uint64_t, State> seqs_;
};

}  // namespace tpserve::speculative
