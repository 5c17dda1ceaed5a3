// From a sequence's host sampling state to what the row algorithm
// (sampling/sampling_row.h) reads: its RowParams (with the one uniform the host
// draws from the sequence's RNG) and its penalty entries. Host code, no CUDA
// headers: used by CudaSampler and by the host test of the row algorithm.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sampling/sampling_row.h"
#include "sampling/sampler.h"

namespace tpserve::sampling {

static_assert(kRowGreedyTemperature == kGreedyTemperature,
              "the row algorithm and the host sampler must agree on greedy");

// `uniform` is the sequence's draw for this token (SequenceSamplingState::
// NextUniform, taken for greedy rows too so that the RNG advances once per token).
inline RowParams MakeRowParams(const SamplingParams& p, double uniform) {
  return RowParams{.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
                   .repetition_penalty = p.repetition_penalty, .presence_penalty = p.presence_penalty,
                   .frequency_penalty = p.frequency_penalty, .num_logprobs = p.logprobs, .uniform = uniform};
}

inline bool PenaltiesOn(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

// Appends the sequence's penalty entries (sorted by token, one per distinct
// token seen) to `out`; nothing when no penalty is on. Returns how many.
inline int64_t AppendPenaltyEntries(const SequenceSamplingState& seq,
                                    std::vector<PenaltyEntry>& out) {
  if (!PenaltiesOn(seq.params())) return 0;
  const size_t first = out.size();
  for (int32_t t : seq.prompt_tokens()) {
    out.push_back(PenaltyEntry{t, seq.OutputCount(t), 1});
  }
  for (const auto& [t, count] : seq.output_counts()) {
    if (!seq.InPrompt(t)) out.push_back(PenaltyEntry{t, count, 0});
  }
  std::sort(out.begin() + first, out.end(),
            [](const PenaltyEntry& a, const PenaltyEntry& b) { return a.token < b.token; });
  return static_cast<int64_t>(out.size() - first);
}

}  // namespace tpserve::sampling
