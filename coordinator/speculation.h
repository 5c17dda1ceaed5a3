// Speculative decoding in the serving path (docs/architecture.md,
// "Speculative decoding"): the coordinator's Drafter. One proposer per
// speculating sequence (prompt lookup or suffix decoding, speculative/),
// fed the sequence's tokens as the scheduler learns them, and one
// SpeculationPolicy per sequence choosing k from its recent acceptance and
// the measured cost of a verification step at the step's batch size, so a
// large batch (where each proposed token costs nearly a one-token step)
// speculates not at all.
//
// Why on the coordinator and not on rank 0 beside the sampler (the issue's
// plan): proposals here need nothing new on the workers but the verification
// itself, and the scheduler sees every proposal when it budgets the step. The
// price: a speculating sequence waits for its last token before its next step
// (Scheduler's Drafter contract), so it is not pipelined one step ahead; at
// the batch sizes where the policy lets speculation run (1 to a few) a step
// costs tens of ms on a CPU worker and the coordinator's turn-around is tens
// of µs. Sequences that do not speculate keep the overlapped pipeline.
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
  // It ended; with suffix decoding its output joins the server's recent outputs.
  void Remove(uint64_t seq_id, std::span<const int32_t> output);
  // A verification's outcome: `proposed` tokens, `accepted` of them kept.
  void Observe(uint64_t seq_id, int32_t proposed, int32_t accepted);

  bool Speculates(const Sequence& seq, int32_t batch) override;
  int32_t Propose(const Sequence& seq, std::span<int32_t> out) override;

  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  struct State {
    speculative::SpeculationPolicy policy;
    int64_t limit = 0;
    int32_t decided = -1;  // the k Speculates chose and Propose has not used yet; -1 none
  };
  SpeculativeDrafter(const SpeculationOptions& options, CoordinatorMetrics* metrics,
                     speculative::ProposerSet proposers);

  SpeculationOptions options_;
  CoordinatorMetrics* metrics_;
  speculative::ProposerSet proposers_;  // one proposer per sequence of seqs_, and the suffix cache
  absl::flat_hash_map<uint64_t, State> seqs_;
};

}  // namespace tpserve
