#include "speculative/ngram_proposer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/random.h"

namespace tpserve::speculative {

absl::Status ValidateNgramOptions(const NgramOptions& o) {
  if (o.prompt_lookup_min < 1 || o.prompt_lookup_min > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt_lookup_min = ", o.prompt_lookup_min, "; it must be in [1, 64]"));
  }
  if (o.prompt_lookup_max < o.prompt_lookup_min || o.prompt_lookup_max > 64) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_lookup_max = ", o.prompt_lookup_max,
                                                   "; it must be in [prompt_lookup_min = ",
                                                   o.prompt_lookup_min, ", 64]"));
  }
  if (o.num_speculative_tokens < 1 || o.num_speculative_tokens > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_speculative_tokens = ", o.num_speculative_tokens, "; it must be in [1, 64]"));
  }
  if (o.max_history <= o.prompt_lookup_max || o.max_history > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_history = ", o.max_history, "; it must be in (prompt_lookup_max = ",
                     o.prompt_lookup_max, ", 2^30]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<NgramProposer> NgramProposer::Create(const NgramOptions& options) {
  if (absl::Status s = ValidateNgramOptions(options); !s.ok()) return s;
  return NgramProposer(options);
}

uint64_t NgramProposer::Key(int64_t last, int32_t n) const {
  uint64_t h = SplitMix64(0x6E6772616D000000ull ^ static_cast<uint64_t>(n));
  for (int32_t i = 0; i < n; ++i) h = SplitMix64(h ^ static_cast<uint32_t>(window_.at(last - i)));
  return h;
}

bool NgramProposer::SameNgram(int64_t a, int64_t b, int32_t n) const {
  for (int32_t i = 0; i < n; ++i) {
    if (window_.at(a - i) != window_.at(b - i)) return false;
  }
  return true;
}

void NgramProposer::Append(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) Append(t);
}

void NgramProposer::Append(int32_t token) {
  const int32_t lo = options_.prompt_lookup_min, hi = options_.prompt_lookup_max;
  if (window_.full()) {
    // The oldest token leaves: so do the n-grams that start at it.
    const int64_t gone = window_.begin();
    for (int32_t n = lo; n <= hi; ++n) {
      const int64_t last = gone + n - 1;
      if (last >= window_.end() - 1) break;  // not indexed (no following token yet)
      auto it = index_.find(Key(last, n));
      if (it != index_.end() && it->second == last) index_.erase(it);
    }
  }
  window_.Push(token);
  // The n-grams ending just before the new token now have a following token.
  const int64_t last = window_.end() - 2;
  for (int32_t n = lo; n <= hi && last - n + 1 >= window_.begin(); ++n) {
    index_.insert_or_assign(Key(last, n), last);
  }
}

int32_t NgramProposer::Propose(std::span<int32_t> out) const {
  const int64_t end = window_.end();
  const int32_t k = static_cast<int32_t>(
      std::min<int64_t>(options_.num_speculative_tokens, static_cast<int64_t>(out.size())));
  if (k <= 0) return 0;
  for (int32_t n = options_.prompt_lookup_max; n >= options_.prompt_lookup_min; --n) {
    if (end - n < window_.begin()) continue;
    auto it = index_.find(Key(end - 1, n));
    if (it == index_.end()) continue;
    const int64_t match = it->second;
    if (match - n + 1 < window_.begin() || !SameNgram(match, end - 1, n)) continue;
    const int32_t r = static_cast<int32_t>(std::min<int64_t>(k, end - 1 - match));
    for (int32_t i = 0; i < r; ++i) out[static_cast<size_t>(i)] = window_.at(match + 1 + i);
    return r;
  }
  return 0;
}

}  // namespace tpserve::speculative
