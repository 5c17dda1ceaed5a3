#include "worker/speculative_greedy.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "backend/step_batch.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

// Greedy, ties to the lowest id (sampling/sampler.h's rule).
int32_t Argmax(std::span<const float> row) {
  size_t best = 0;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] > row[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Computes `tokens` after `computed` cached ones with a logits row for each of
// the last num_logits; the argmax of each row into `target`.
absl::Status Step(Model& model, KvCache& cache, std::span<const int32_t> tokens, int64_t computed,
                  std::span<const int32_t> block_table, int32_t num_logits, std::vector<int32_t>& target) {
  const StepSequence seq{tokens, computed, block_table, num_logits};
  TPSERVE_ASSIGN_OR_RETURN(StepBatch step, StepBatch::Build(std::span<const StepSequence>(&seq, 1), cache.block_size()));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<Logits> logits, model.Forward(step.view(), cache));
  if (!logits.has_value()) return absl::FailedPreconditionError("GenerateGreedy: runs on rank 0 (the logits)");
  target.clear();
  for (int64_t r = 0; r < logits->num_seqs; ++r) target.push_back(Argmax(logits->row(r)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GreedyResult> GenerateGreedy(Model& model, KvCache& cache, std::span<const int32_t> prompt,
                                            std::span<const int32_t> block_table, const GreedyOptions& options,
                                            speculative::Proposer* proposer) {
  const int32_t k = options.num_speculative_tokens;
  const int64_t positions = static_cast<int64_t>(prompt.size()) + options.max_tokens + k;
  if (prompt.empty() || options.max_tokens < 1 || k < 1 ||
      positions > static_cast<int64_t>(block_table.size()) * cache.block_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GenerateGreedy: prompt of ", prompt.size(), " tokens, max_tokens ", options.max_tokens,
        ", num_speculative_tokens ", k, ", block_table of ", block_table.size(), " blocks of ", cache.block_size(),
        "; the prompt and max_tokens need >= 1, k >= 1, and the table prompt + max_tokens + k positions"));
  }
  GreedyResult result;
  result.accepted_at.assign(static_cast<size_t>(k), 0);
  result.steps_by_proposed.assign(static_cast<size_t>(k) + 1, 0);
  std::vector<int32_t> seq(prompt.begin(), prompt.end()), target, step_tokens(static_cast<size_t>(k) + 1);
  speculative::PolicyOptions policy_options = options.policy;
  policy_options.max_speculative_tokens = k;
  speculative::SpeculationPolicy policy(policy_options);
  auto t0 = std::chrono::steady_clock::now();
  TPSERVE_RETURN_IF_ERROR(Step(model, cache, prompt, 0, block_table, 1, target));
  result.prompt_seconds = Since(t0);
  t0 = std::chrono::steady_clock::now();
  result.tokens.push_back(target[0]);
  seq.push_back(target[0]);
  if (proposer != nullptr) proposer->Append(seq);
  while (static_cast<int32_t>(result.tokens.size()) < options.max_tokens) {
    // The last token (not yet in the cache) and what the proposer offers after it.
    step_tokens[0] = seq.back();
    const int32_t want = options.policy_cost.empty() ? k : policy.Choose(options.policy_cost);
    const int32_t n = proposer == nullptr || want == 0
                          ? 0
                          : proposer->Propose(std::span<int32_t>(step_tokens).subspan(1, static_cast<size_t>(want)));
    const std::span<const int32_t> tokens = std::span<const int32_t>(step_tokens).first(static_cast<size_t>(n) + 1);
    TPSERVE_RETURN_IF_ERROR(
        Step(model, cache, tokens, static_cast<int64_t>(seq.size()) - 1, block_table, n + 1, target));
    ++result.steps;
    ++result.steps_by_proposed[static_cast<size_t>(n)];
    const int32_t a = speculative::AcceptGreedy(tokens.subspan(1), target);
    policy.Observe(n, a);
    result.proposed += n;
    result.accepted += a;
    for (int32_t i = 0; i < a; ++i) ++result.accepted_at[static_cast<size_t>(i)];
    const size_t before = seq.size();
    for (int32_t i = 0; i <= a && static_cast<int32_t>(result.tokens.size()) < options.max_tokens; ++i) {
      const int32_t t = i < a ? tokens[static_cast<size_t>(i) + 1] : target[static_cast<size_t>(a)];
      result.tokens.push_back(t);
      seq.push_back(t);
    }
    if (proposer != nullptr) proposer->Append(std::span<const int32_t>(seq).subspan(before));
  }
  result.decode_seconds = Since(t0);
  return result;
}

}  // namespace tpserve
