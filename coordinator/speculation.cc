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

SpeculativeDrafter::SpeculativeDrafter(const SpeculationOptions& options, CoordinatorMetrics* metrics,
                                       speculative::ProposerSet proposers)
    : options_(options), metrics_(metrics), proposers_(std::move(proposers)) {}

absl::StatusOr<std::unique_ptr<SpeculativeDrafter>> SpeculativeDrafter::Create(const SpeculationOptions& options,
                                                                                CoordinatorMetrics* metrics) {
  TPSERVE_RETURN_IF_ERROR(ValidateSpeculationOptions(options));
  TPSERVE_ASSIGN_OR_RETURN(speculative::ProposerSet proposers,
                           speculative::ProposerSet::Create(ProposerConfigOf(options)));
  return std::unique_ptr<SpeculativeDrafter>(new SpeculativeDrafter(options, metrics, std::move(proposers)));
}

void SpeculativeDrafter::Add(uint64_t seq_id, int64_t limit) {
  proposers_.Add(seq_id);
  speculative::PolicyOptions policy;
  policy.max_speculative_tokens = options_.num_speculative_tokens;
  seqs_.insert_or_assign(seq_id, State{.policy = speculative::SpeculationPolicy(policy), .limit = limit});
}

void SpeculativeDrafter::Remove(uint64_t seq_id, std::span<const int32_t> output) {
  if (seqs_.erase(seq_id) > 0) proposers_.Remove(seq_id, output);
}

void SpeculativeDrafter::Observe(uint64_t seq_id, int32_t proposed, int32_t accepted) {
  if (auto it = seqs_.find(seq_id); it != seqs_.end()) it->second.policy.Observe(proposed, accepted);
  if (metrics_ != nullptr) metrics_->OnSpeculation(proposed, accepted);
}

bool SpeculativeDrafter::Speculates(const Sequence& seq, int32_t batch) {
  auto it = seqs_.find(seq.id);
  if (it == seqs_.end()) return false;
  State& st = it->second;
  // Tokens past the limit are never kept: proposals need room for two more (one kept, one after it).
  if (st.limit - seq.length() < 2) return false;
  if (st.decided < 0) {
    st.decided = options_.policy ? st.policy.Choose(VerificationCost(batch)) : options_.num_speculative_tokens;
  }
  if (st.decided > 0) return true;  // kept for Propose (the sequence may first wait for its token)
  st.decided = -1;                  // a plain decode this step
  return false;
}

int32_t SpeculativeDrafter::Propose(const Sequence& seq, std::span<int32_t> out) {
  auto it = seqs_.find(seq.id);
  if (it == seqs_.end()) return 0;
  State& st = it->second;
  const int64_t known = std::ssize(seq.tokens);
  proposers_.Extend(seq.id, seq.tokens);
  // A step keeps at most k + 1 tokens: propose none that would land past the limit.
  const int64_t room = std::min<int64_t>({std::ssize(out), std::max(st.decided, 0), st.limit - known - 1});
  st.decided = -1;
  if (room <= 0) return 0;
  return proposers_.Propose(seq.id, out.first(static_cast<size_t>(room)));
}

}  // namespace tpserve
