// From a sequence's host sampling state to what the row algorithm
// (sampling/sampling_row.h) reads: its RowParams (with the one uniform the host
// draws from the sequence's RNG) and its entries (penalties and token-level
// controls). Host code, no CUDA
// headers: used by CudaSampler and by the host test of the row algorithm.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
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

// A row's entries, as the row algorithm reads them.
struct RowEntries {
  int64_t count = 0;          // entries appended
  bool allowed_only = false;  // they are the row's only candidates (RowParams::allowed_only)
};

// Appends the sequence's entries for its next token to `out`, sorted by token,
// one per token, every token < vocab: the tokens its penalties need (the
// distinct prompt ids with a repetition penalty, the generated ids, when a
// penalty is on) and those its token-level controls name (logit_bias, the
// bad words' bans as bias -inf). With allowed_token_ids the entries are
// exactly the allowed tokens (the others are no candidates, and their
// penalties or biases do not matter). O(entries log entries), never O(vocab).
inline RowEntries AppendRowEntries(const SequenceSamplingState& seq, int32_t vocab,
                                   std::vector<PenaltyEntry>& out) {
  const size_t first = out.size();
  const SamplingParams& p = seq.params();
  const std::span<const int32_t> allowed =
      p.controls != nullptr ? AllowedInVocab(*p.controls, vocab) : std::span<const int32_t>();
  if (PenaltiesOn(p)) {
    for (int32_t t : seq.prompt_tokens()) {
      if (t < vocab) out.push_back(PenaltyEntry{t, seq.OutputCount(t), 1});
    }
    for (const auto& [t, count] : seq.output_counts()) {
      if (!seq.InPrompt(t) && t < vocab) out.push_back(PenaltyEntry{t, count, 0});
    }
  }
  auto by_token = [](const PenaltyEntry& a, const PenaltyEntry& b) { return a.token < b.token; };
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), by_token);
  if (p.controls != nullptr) {
    std::vector<int32_t> banned;
    seq.AppendBannedTokens(banned);
    std::vector<std::pair<int32_t, float>> edits;
    RowEdits(*p.controls, banned, vocab, edits);
    const size_t seen = out.size();
    for (const auto& [t, bias] : edits) {  // merge: a seen token takes its bias, a new one is appended
      auto it = std::lower_bound(out.begin() + static_cast<std::ptrdiff_t>(first),
                                 out.begin() + static_cast<std::ptrdiff_t>(seen), PenaltyEntry{t, 0, 0}, by_token);
      if (it != out.begin() + static_cast<std::ptrdiff_t>(seen) && it->token == t) {
        it->bias = bias;
      } else {
        out.push_back(PenaltyEntry{t, 0, 0, bias});
      }
    }
    std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), by_token);
    const size_t named = out.size();
    for (int32_t t : allowed) {  // allowed tokens without an entry yet
      auto it = std::lower_bound(out.begin() + static_cast<std::ptrdiff_t>(first),
                                 out.begin() + static_cast<std::ptrdiff_t>(named), PenaltyEntry{t, 0, 0}, by_token);
      if (it == out.begin() + static_cast<std::ptrdiff_t>(named) || it->token != t) out.push_back(PenaltyEntry{t, 0, 0});
    }
    if (out.size() > named) std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), by_token);
    if (!allowed.empty()) {  // keep only the candidates
      auto keep = std::remove_if(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                                 [&](const PenaltyEntry& e) {
                                   return !std::binary_search(allowed.begin(), allowed.end(), e.token);
                                 });
      out.erase(keep, out.end());
    }
  }
  return RowEntries{static_cast<int64_t>(out.size() - first), !allowed.empty()};
}

// The penalty entries alone (no controls, any vocabulary): what
// AppendRowEntries appends for a sequence without token-level controls.
inline int64_t AppendPenaltyEntries(const SequenceSamplingState& seq, std::vector<PenaltyEntry>& out) {
  return AppendRowEntries(seq, std::numeric_limits<int32_t>::max(), out).count;
}

}  // namespace tpserve::sampling
