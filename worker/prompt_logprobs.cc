#include "worker/prompt_logprobs.h"

#include <algorithm>

#include "base/status_macros.h"

namespace tpserve {

PromptRows RowsOfChunk(uint64_t seq_id, std::span<const int32_t> prompt, int64_t start, int64_t num_tokens,
                       int64_t step_row, int32_t top_n) {
  const int64_t first = start + 1, end = std::min<int64_t>(start + num_tokens + 1, std::ssize(prompt));
  PromptRows rows{.seq_id = seq_id, .first_row = step_row, .first_position = first, .top_n = top_n};
  if (end > first) rows.targets = prompt.subspan(static_cast<size_t>(first), static_cast<size_t>(end - first));
  return rows;
}

absl::StatusOr<std::vector<PromptLogprobs>> ScorePromptRows(Model& model, std::span<const PromptRows> rows) {
  std::vector<PromptLogprobs> out;
  std::vector<int32_t> scratch;
  const int64_t per_pass = model.max_logits_rows();
  for (const PromptRows& r : rows) {
    const int64_t n = std::ssize(r.targets);
    if (n == 0) continue;
    PromptLogprobs scored{.seq_id = r.seq_id, .first_position = r.first_position, .tokens = {}};
    for (int64_t done = 0; done < n; done += per_pass) {
      const int64_t m = std::min(per_pass, n - done);
      TPSERVE_ASSIGN_OR_RETURN(const std::optional<Logits> logits, model.TokenLogits(r.first_row + done, m));
      if (!logits) continue;  // not rank 0
      for (int64_t i = 0; i < m; ++i) {
        scored.tokens.push_back(ScoreToken(logits->row(i), r.targets[static_cast<size_t>(done + i)], r.top_n, scratch));
      }
    }
    if (!scored.tokens.empty()) out.push_back(std::move(scored));
  }
  return out;
}

}  // namespace tpserve
