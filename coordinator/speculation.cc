#include "coordinator/speculation.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "coordinator/coordinator_metrics.h"

namespace tpserve {
namespace {

// README, "Speculative decoding" (2026-12-03, CPU backend, Qwen3-0.6B shape):
// the medians of c(k). Up to 32 rows a step's GEMMs read each weight once
// (backend/cpu_gemm_kernel.h, SmallRows); past that they pack. Batch 1: up to
// k = 8 (9 rows) in 1.0-1.3 steps. Batch 8 since the 32-row path: k <= 3
// (32 rows) measured again, the packed k >= 4 as before. Past batch 8 every
// verification packs, as batch 8 did at every k before: that row.
constexpr std::array<double, 9> kCostBatch1 = {1.0, 1.04, 1.19, 1.26, 1.30, 1.24, 1.17, 1.19, 1.28};
constexpr std::array<double, 9> kCostBatch8 = {1.0, 1.41, 2.02, 2.44, 3.26, 4.35, 4.92, 5.21, 5.00};
constexpr std::array<double, 9> kCostPacked = {1.0, 2.00, 2.53, 2.80, 3.26, 4.35, 4.92, 5.21, 5.00};

}  // namespace

absl::Status ValidateSpeculationOptions(const SpeculationOptions& o) {
  if (o.method != "off" && o.method != "ngram" && o.method != "suffix") {
    return absl::InvalidArgumentError(absl::StrCat("--speculative-method: \"", o.method,
                                                   "\" is none of ngram, suffix, off"));
  }
  if (o.num_speculative_tokens < 1 || o.num_speculative_tokens > 16) {
    return absl::InvalidArgumentError(absl::StrCat("--num-speculative-tokens: ", o.num_speculative_tokens,
                                                   " is outside [1, 16]"));
  }
  if (o.method == "ngram") {
    TPSERVE_RETURN_IF_ERROR(speculative::ValidateNgramOptions({.prompt_lookup_min = o.prompt_lookup_min,
                                                               .prompt_lookup_max = o.prompt_lookup_max,
                                                               .num_speculative_tokens = o.num_speculative_tokens}));
  }
  return absl::OkStatus();
}

std::span<const double> VerificationCost(int32_t batch) {
  if (batch <= 1) return kCostBatch1;
  return batch <= 8 ? std::span<const double>(kCostBatch8) : std::span<const double>(kCostPacked);
}

SpeculativeDrafter::SpeculativeDrafter(const SpeculationOptions& options, CoordinatorMetrics* metrics)
    : options_(options), metrics_(metrics) {}

absl::StatusOr<std::unique_ptr<SpeculativeDrafter>> SpeculativeDrafter::Create(const SpeculationOptions& options,
                                                                                CoordinatorMetrics* metrics) {
  TPSERVE_RETURN_IF_ERROR(ValidateSpeculationOptions(options));
  std::unique_ptr<SpeculativeDrafter> d(new SpeculativeDrafter(options, metrics));
  if (options.method == "suffix") {
    TPSERVE_ASSIGN_OR_RETURN(speculative::SuffixCache cache, speculative::SuffixCache::Create({}));
    d->suffix_cache_ = std::make_unique<speculative::SuffixCache>(std::move(cache));
  }
  TPSERVE_RETURN_IF_ERROR(d->MakeProposer().status());  // the proposers' options, checked once
  return d;
}

absl::StatusOr<std::unique_ptr<speculative::Proposer>> SpeculativeDrafter::MakeProposer() {
  if (options_.method == "suffix") {
    speculative::SuffixOptions o;
    o.num_speculative_tokens = options_.num_speculative_tokens;
    TPSERVE_ASSIGN_OR_RETURN(speculative::SuffixProposer p, speculative::SuffixProposer::Create(o, suffix_cache_.get()));
    return speculative::MakeProposer(std::move(p));
  }
  TPSERVE_ASSIGN_OR_RETURN(speculative::NgramProposer p,
                           speculative::NgramProposer::Create({.prompt_lookup_min = options_.prompt_lookup_min,
                                                               .prompt_lookup_max = options_.prompt_lookup_max,
                                                               .num_speculative_tokens = options_.num_speculative_tokens}));
  return speculative::MakeProposer(std::move(p));
}

void SpeculativeDrafter::Add(uint64_t seq_id, int64_t limit) {
  absl::StatusOr<std::unique_ptr<speculative::Proposer>> proposer = MakeProposer();
  if (!proposer.ok()) return;  // checked by Create: cannot fail
  speculative::PolicyOptions policy;
  policy.max_speculative_tokens = options_.num_speculative_tokens;
  seqs_.insert_or_assign(seq_id, State{.proposer = std::move(*proposer),
                                       .policy = speculative::SpeculationPolicy(policy),
                                       .limit = limit});
}

void SpeculativeDrafter::Remove(uint64_t seq_id, std::span<const int32_t> output) {
  if (seqs_.erase(seq_id) > 0 && suffix_cache_ != nullptr && !output.empty()) suffix_cache_->AddOutput(output);
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
  if (st.fed < known) {
    st.proposer->Append(std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(st.fed)));
    st.fed = known;
  }
  // A step keeps at most k + 1 tokens: propose none that would land past the limit.
  const int64_t room = std::min<int64_t>({std::ssize(out), std::max(st.decided, 0), st.limit - known - 1});
  st.decided = -1;
  if (room <= 0) return 0;
  return st.proposer->Propose(out.first(static_cast<size_t>(room)));
}

}  // namespace tpserve
