// Speculative decoding in the serving path (docs/architecture.md,
// "Speculative decoding"): the coordinator's Drafter. The proposers live on
// rank 0 beside the sampler (worker/step_runner.h, one per speculating
// sequence, made from Load's method: ProposerConfigOf); here, per sequence,
// its SpeculationPolicy choosing k from its recent acceptance (learned from
// the step results) and the measured cost of a verification step at the
// step's batch size, so a large batch (where each proposed token costs
// nearly a one-token step) speculates not at all, and its limit (no proposal
// past max_tokens or the model's length).
//
// Engine thread only (thread-compatible).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "scheduler/scheduler.h"
#include "speculative/policy.h"
#include "speculative/proposer_set.h"

namespace tpserve {

class CoordinatorMetrics;

struct SpeculationOptions {
  std::string method = "off";          // "ngram" (prompt lookup), "suffix" or "off"
  int32_t num_speculative_tokens = 4;  // k: most proposed tokens per sequence and step, [1, 16]
  // Each sequence's k from its acceptance and c(k) at the step's batch size
  // (SpeculationPolicy); false: always propose up to k (tests, benchmarks).
  bool policy = true;
  int32_t prompt_lookup_min = 2;       // ngram: shortest n-gram matched
  int32_t prompt_lookup_max = 4;       // ngram: longest
  bool enabled() const { return method != "off"; }
};

// INVALID_ARGUMENT naming the flag (--speculative-method, --num-speculative-tokens, ...).
absl::Status ValidateSpeculationOptions(const SpeculationOptions& options);
// The proposers' part of the options (speculative::ProposerSet).
speculative::ProposerConfig ProposerConfigOf(const SpeculationOptions& options);

// c(k) for k = 0..8 at `batch` running sequences: a verification step with k
// proposed tokens per sequence over the one-token step (README, "Speculative
// decoding": the CPU backend, Qwen3-0.6B shape). Batch 1 uses the batch-1
// row; 2 to 8 the batch-8 row (1 to 8 proposals a sequence at 1.4-3.9 steps:
// a sequence right half the time proposes 1, one right 80% of the time 4);
// past 8 the packed GEMM's batch-8 row from before the panel path (c(1) = 2),
// an upper bound there, so only a sequence right 80% of the time proposes.
std::span<const double> VerificationCost(int32_t batch);

class SpeculativeDrafter final : public Drafter {
 public:
  // `metrics` (may be null) records the drafts and their acceptance.
  static absl::StatusOr<std::unique_ptr<SpeculativeDrafter>> Create(const SpeculationOptions& options,
                                                                    CoordinatorMetrics* metrics);

  // Sequence `seq_id` may speculate; no token past length `limit` (prompt +
  // max_tokens, at most the model's length) is ever kept, so none is proposed
  // there.
  void Add(uint64_t seq_id, int64_t limit);
  // It ended (rank 0 drops its proposer with the next step's `finished`).
  void Remove(uint64_t seq_id);
  // A verification's outcome: `proposed` tokens, `accepted` of them kept;
  // `pipelined`: its step was planned one step ahead (ScheduledSequence).
  void Observe(uint64_t seq_id, int32_t proposed, int32_t accepted, bool pipelined);

  bool Holds(uint64_t seq_id) const override { return seqs_.contains(seq_id); }
  int32_t Proposals(const Sequence& seq, int32_t batch) override;

  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  struct State {
    speculative::SpeculationPolicy policy;
    int64_t limit = 0;
  };
  SpeculativeDrafter(const SpeculationOptions& options, CoordinatorMetrics* metrics)
      : options_(options), metrics_(metrics) {}

  SpeculationOptions options_;
  CoordinatorMetrics* metrics_;
  absl::flat_hash_map<uint64_t, State> seqs_;
};

}  // namespace tpserve
