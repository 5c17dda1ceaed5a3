#include "coordinator/speculation.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "coordinator/coordinator_metrics.h"

namespace tpserve {
namespace {

// README, "Speculative decoding" (2026-12-03, CPU backend, Qwen3-0.6B shape):
// the medians of c(k). A step's GEMMs read each weight from memory once at
// any row count (backend/cpu_gemm_kernel.h: up to 16 rows transposed in
// registers, 17 to 128 one packed panel at a time, more in slabs). Batch 1: up
// to k = 8 (9 rows) in 1.0-1.4 steps. Batch 8 with the 17-128-row panel path
// (four runs): k = 1..8 in 1.4-3.9 steps, about 0.3 a step per proposal past
// k = 2. Past batch 8: the packed GEMM's batch-8 row from before those paths,
// kept as an upper bound (after them batch 16 measured 1.58, 2.01, 2.51, 2.99
// for k = 1-4 and batch 64 1.72, 2.53 for k = 1-2, one run each).
constexpr std::array<double, 9> kCostBatch1 = {1.0, 1.04, 1.19, 1.26, 1.30, 1.24, 1.17, 1.19, 1.28};
constexpr std::array<double, 9> kCostBatch8 = {1.0, 1.39, 1.95, 2.24, 2.54, 2.84, 3.27, 3.53, 3.85};
constexpr std::array<double, 9> kCostPacked = {1.0, 2.00, 2.53, 2.80, 3.26, 4.35, 4.92, 5.21, 5.00};

}  // namespace

absl::Status ValidateSpeculationOptions(const SpeculationOptions& o) {
  return speculative::ValidateProposerConfig(ProposerConfigOf(o));
}

speculative::ProposerConfig ProposerConfigOf(const SpeculationOptions& o) {
  return {.method = o.method,
          .num_speculative_tokens = o.num_speculative_tokens,
          .prompt_lookup_min = o.prompt_lookup_min,
          .prompt_lookup_max = o.prompt_lookup_max};
}

std::span<const double> VerificationCost(int32_t batch) {
  if (batch <= 1) return kCostBatch1;
  return batch <= 8 ? std::span<const double>(kCostBatch8) : std::span<const double>(kCostPacked);
}

absl::StatusOr<std::unique_ptr<SpeculativeDrafter>> SpeculativeDrafter::Create(const SpeculationOptions& options,
                                                                                CoordinatorMetrics* metrics) {
  TPSERVE_RETURN_IF_ERROR(ValidateSpeculationOptions(options));
  // Rank 0 makes the proposers from the same options: a set here checks them as Load will.
  TPSERVE_RETURN_IF_ERROR(speculative::ProposerSet::Create(ProposerConfigOf(options)).status());
  return std::unique_ptr<SpeculativeDrafter>(new SpeculativeDrafter(options, metrics));
}

void SpeculativeDrafter::Add(uint64_t seq_id, int64_t limit) {
  speculative::PolicyOptions policy;
  policy.max_speculative_tokens = options_.num_speculative_tokens;
  seqs_.insert_or_assign(seq_id, State{.policy = speculative::SpeculationPolicy(policy), .limit = limit});
}

void SpeculativeDrafter::Remove(uint64_t seq_id) { seqs_.erase(seq_id); }

void SpeculativeDrafter::Observe(uint64_t seq_id, int32_t proposed, int32_t accepted, bool pipelined) {
  if (auto it = seqs_.find(seq_id); it != seqs_.end()) it->second.policy.Observe(proposed, accepted);
  if (metrics_ != nullptr) metrics_->OnSpeculation(proposed, accepted, pipelined);
}

int32_t SpeculativeDrafter::Proposals(const Sequence& seq, int32_t batch) {
  auto it = seqs_.find(seq.id);
  if (it == seqs_.end()) return 0;
  State& st = it->second;
  // The next step keeps at most k + 1 tokens after seq.length(): none past the limit.
  const int64_t room = st.limit - seq.length() - 1;
  if (room <= 0) return 0;
  const int32_t k = options_.policy ? st.policy.Choose(VerificationCost(batch)) : options_.num_speculative_tokens;
  return static_cast<int32_t>(std::min<int64_t>(k, room));
}

}  // namespace tpserve
