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
  if (PenaltiesOn(p)) {
    for (int32_t t : seq.prompt_tokens()) {
      if (t < vocab) out.push_back(PenaltyEntry{t, seq.OutputCount(t), 1});
    }
    for (const auto& [t, count] : seq.output_counts()) {
      if (!seq.InPrompt(t) && t < vocab) out.push_back(PenaltyEntry{t, count, 0});
    }
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
            [](const PenaltyEntry& a, const PenaltyEntry& b) { return a.token < b.token; });
  if (p.controls == nullptr) return RowEntries{static_cast<int64_t>(out.size() - first), false};
  // Merged in one linear pass each (a step stages every row again): the
  // sorted penalty entries with the sorted edits, then with the allowed list.
  thread_local std::vector<int32_t> banned;
  thread_local std::vector<std::pair<int32_t, float>> edits;
  thread_local std::vector<PenaltyEntry> named;
  banned.clear();
  seq.AppendBannedTokens(banned);
  RowEdits(*p.controls, banned, vocab, edits);
  named.clear();
  size_t j = 0;
  for (size_t i = first; i < out.size() || j < edits.size();) {
    if (j == edits.size() || (i < out.size() && out[i].token < edits[j].first)) {
      named.push_back(out[i++]);
    } else if (i == out.size() || edits[j].first < out[i].token) {
      named.push_back(PenaltyEntry{edits[j].first, 0, 0, edits[j].second});
      ++j;
    } else {  // a penalised token with a bias or a ban
      named.push_back(out[i++]);
      named.back().bias = edits[j++].second;
    }
  }
  out.resize(first);
  const std::span<const int32_t> allowed = AllowedInVocab(*p.controls, vocab);
  if (allowed.empty()) {
    out.insert(out.end(), named.begin(), named.end());
  } else {  // exactly the allowed tokens: the others are no candidates, their entries do not matter
    size_t k = 0;
    for (int32_t t : allowed) {
      while (k < named.size() && named[k].token < t) ++k;
      out.push_back(k < named.size() && named[k].token == t ? named[k] : PenaltyEntry{t, 0, 0});
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
