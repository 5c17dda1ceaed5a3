#include "sampling/token_controls.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "sampling/limits.h"

namespace tpserve {

int32_t TokenControls::TailLength() const {
  size_t longest = 0;
  for (const std::vector<int32_t>& w : bad_words) longest = std::max(longest, w.size());
  return longest == 0 ? 0 : static_cast<int32_t>(longest - 1);
}

void NormalizeTokenControls(TokenControls& c) {
  std::stable_sort(c.logit_bias.begin(), c.logit_bias.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // Of equal tokens keep the last given: reverse each run's order by keeping its end.
  std::vector<std::pair<int32_t, float>> unique;
  unique.reserve(c.logit_bias.size());
  for (size_t i = 0; i < c.logit_bias.size(); ++i) {
    if (i + 1 < c.logit_bias.size() && c.logit_bias[i + 1].first == c.logit_bias[i].first) continue;
    unique.push_back(c.logit_bias[i]);
  }
  c.logit_bias = std::move(unique);
  std::sort(c.allowed_token_ids.begin(), c.allowed_token_ids.end());
  c.allowed_token_ids.erase(std::unique(c.allowed_token_ids.begin(), c.allowed_token_ids.end()),
                            c.allowed_token_ids.end());
}

absl::Status ValidateTokenControls(const TokenControls& c, int32_t vocab) {
  auto bad_id = [&](int32_t t) { return t < 0 || t >= vocab; };
  if (std::ssize(c.logit_bias) > kMaxLogitBias) {
    return absl::InvalidArgumentError(absl::StrCat("logit_bias: ", c.logit_bias.size(),
                                                   " entries are more than the limit of ", kMaxLogitBias,
                                                   "; bias fewer tokens"));
  }
  for (size_t i = 0; i < c.logit_bias.size(); ++i) {
    const auto [t, bias] = c.logit_bias[i];
    if (bad_id(t)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias: token id ", t, " is outside the vocabulary (ids 0..",
                                                     vocab - 1, ")"));
    }
    if (!(std::abs(bias) <= kMaxLogitBiasValue)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias: the bias of token ", t, " is ", bias,
                                                     ", outside [-100, 100]"));
    }
    if (i > 0 && c.logit_bias[i - 1].first >= t) {
      return absl::InvalidArgumentError("logit_bias: entries are not sorted by token (NormalizeTokenControls)");
    }
  }
  if (std::ssize(c.allowed_token_ids) > kMaxAllowedTokenIds) {
    return absl::InvalidArgumentError(absl::StrCat("allowed_token_ids: ", c.allowed_token_ids.size(),
                                                   " ids are more than the limit of ", kMaxAllowedTokenIds));
  }
  for (size_t i = 0; i < c.allowed_token_ids.size(); ++i) {
    const int32_t t = c.allowed_token_ids[i];
    if (bad_id(t)) {
      return absl::InvalidArgumentError(absl::StrCat("allowed_token_ids[", i, "]: token id ", t,
                                                     " is outside the vocabulary (ids 0..", vocab - 1, ")"));
    }
    if (i > 0 && c.allowed_token_ids[i - 1] >= t) {
      return absl::InvalidArgumentError("allowed_token_ids: not sorted and unique (NormalizeTokenControls)");
    }
  }
  if (std::ssize(c.bad_words) > kMaxBadWords) {
    return absl::InvalidArgumentError(absl::StrCat("bad_words: ", c.bad_words.size(),
                                                   " words are more than the limit of ", kMaxBadWords));
  }
  int64_t tokens = 0;
  for (size_t i = 0; i < c.bad_words.size(); ++i) {
    if (c.bad_words[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("bad_words[", i, "]: encodes to no tokens; give some text"));
    }
    tokens += std::ssize(c.bad_words[i]);
    for (int32_t t : c.bad_words[i]) {
      if (bad_id(t)) {
        return absl::InvalidArgumentError(absl::StrCat("bad_words[", i, "]: token id ", t,
                                                       " is outside the vocabulary (ids 0..", vocab - 1, ")"));
      }
    }
  }
  if (tokens > kMaxBadWordTokens) {
    return absl::InvalidArgumentError(absl::StrCat("bad_words: the words encode to ", tokens,
                                                   " tokens together, more than the limit of ", kMaxBadWordTokens,
                                                   "; give fewer or shorter words"));
  }
  return absl::OkStatus();
}

void AppendBannedTokens(const TokenControls& c, std::span<const int32_t> tail, std::vector<int32_t>& out) {
  for (const std::vector<int32_t>& w : c.bad_words) {
    const size_t prefix = w.size() - 1;
    if (prefix > tail.size()) continue;  // the output is shorter than the word's prefix
    if (std::equal(w.begin(), w.end() - 1, tail.end() - static_cast<std::ptrdiff_t>(prefix))) out.push_back(w.back());
  }
}

void RowEdits(const TokenControls& c, std::span<const int32_t> banned, int32_t vocab,
              std::vector<std::pair<int32_t, float>>& out) {
  out.clear();
  for (const auto& e : c.logit_bias) {
    if (e.first < vocab) out.push_back(e);
  }
  if (banned.empty()) return;
  const size_t biased = out.size();
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  for (int32_t t : banned) {
    if (t < 0 || t >= vocab) continue;
    auto it = std::lower_bound(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(biased), t,
                               [](const auto& e, int32_t token) { return e.first < token; });
    if (it != out.begin() + static_cast<std::ptrdiff_t>(biased) && it->first == t) {
      it->second = kBanned;
    } else {
      out.emplace_back(t, kBanned);
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out.erase(std::unique(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first == b.first; }),
            out.end());
}

std::span<const int32_t> AllowedInVocab(const TokenControls& c, int32_t vocab) {
  const auto end = std::lower_bound(c.allowed_token_ids.begin(), c.allowed_token_ids.end(), vocab);
  return {c.allowed_token_ids.data(), static_cast<size_t>(end - c.allowed_token_ids.begin())};
}

}  // namespace tpserve
