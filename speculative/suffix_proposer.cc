#include "speculative/suffix_proposer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace tpserve::speculative {
namespace {

absl::Status CheckDepth(const char* what, int32_t d) {
  if (d >= 2 && d <= SuffixTrie::kMaxDepth) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ".max_depth = ", d, "; it must be in [2, ", SuffixTrie::kMaxDepth, "]"));
}

}  // namespace

absl::Status ValidateSuffixOptions(const SuffixOptions& o) {
  if (absl::Status s = CheckDepth("suffix", o.max_depth); !s.ok()) return s;
  if (o.num_speculative_tokens < 1 || o.num_speculative_tokens > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_speculative_tokens = ", o.num_speculative_tokens, "; it must be in [1, 64]"));
  }
  if (!(o.max_spec_factor >= 0) || !std::isfinite(o.max_spec_factor) || !std::isfinite(o.max_spec_offset)) {
    return absl::InvalidArgumentError(absl::StrCat("max_spec_factor = ", o.max_spec_factor,
                                                   ", max_spec_offset = ", o.max_spec_offset,
                                                   "; the factor must be >= 0 and both finite"));
  }
  if (!(o.min_token_prob >= 0 && o.min_token_prob <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_token_prob = ", o.min_token_prob, "; it must be in [0, 1]"));
  }
  if (o.max_history <= o.max_depth || o.max_history > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("max_history = ", o.max_history,
                                                   "; it must be in (max_depth = ", o.max_depth, ", 2^30]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSuffixCacheOptions(const SuffixCacheOptions& o) {
  if (absl::Status s = CheckDepth("suffix cache", o.max_depth); !s.ok()) return s;
  if (o.max_cached_sequences < 1 || o.max_cached_tokens < 1 || o.max_cached_tokens > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_cached_sequences = ", o.max_cached_sequences, ", max_cached_tokens = ", o.max_cached_tokens,
        "; both must be >= 1, the tokens <= 2^30"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SuffixCache> SuffixCache::Create(const SuffixCacheOptions& options) {
  if (absl::Status s = ValidateSuffixCacheOptions(options); !s.ok()) return s;
  return SuffixCache(options);
}

void SuffixCache::AddOutput(std::span<const int32_t> output) {
  if (static_cast<int64_t>(output.size()) > options_.max_cached_tokens) {
    output = output.last(static_cast<size_t>(options_.max_cached_tokens));
  }
  if (output.empty()) return;
  while (!outputs_.empty() && (num_sequences() + 1 > options_.max_cached_sequences ||
                               num_tokens_ + static_cast<int64_t>(output.size()) > options_.max_cached_tokens)) {
    EvictOldest();
  }
  outputs_.emplace_back(output.begin(), output.end());
  num_tokens_ += static_cast<int64_t>(output.size());
  for (size_t s = 0; s < output.size(); ++s) trie_.Add(output.subspan(s));
}

void SuffixCache::EvictOldest() {
  const std::vector<int32_t>& old = outputs_.front();
  const std::span<const int32_t> tokens(old);
  for (size_t s = 0; s < tokens.size(); ++s) trie_.Remove(tokens.subspan(s));
  num_tokens_ -= static_cast<int64_t>(old.size());
  outputs_.pop_front();
}

absl::StatusOr<SuffixProposer> SuffixProposer::Create(const SuffixOptions& options, SuffixCache* cache) {
  if (absl::Status s = ValidateSuffixOptions(options); !s.ok()) return s;
  return SuffixProposer(options, cache);
}

SuffixProposer::SuffixProposer(const SuffixOptions& options, SuffixCache* cache)
    : options_(options),
      cache_(cache),
      window_(options.max_history),
      trie_(options.max_depth),
      active_(static_cast<size_t>(options.max_depth), SuffixTrie::kNone),
      cache_active_(cache != nullptr ? static_cast<size_t>(cache->options().max_depth) : 0),
      scratch_(static_cast<size_t>(options.num_speculative_tokens)) {}

void SuffixProposer::Append(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) Append(t);
}

void SuffixProposer::Append(int32_t token) {
  const int64_t depth = options_.max_depth;
  if (window_.full()) {
    // The strings that start at the token leaving the window leave the trie.
    // None is an active suffix's only occurrence: those start within the last
    // max_depth tokens, and max_history > max_depth.
    const int64_t gone = window_.begin();
    const int64_t n = std::min(depth, window_.end() - gone);
    int32_t path[SuffixTrie::kMaxDepth];
    for (int64_t i = 0; i < n; ++i) path[i] = window_.at(gone + i);
    trie_.Remove(std::span<const int32_t>(path, static_cast<size_t>(n)));
  }
  window_.Push(token);
  // active_[d] = the last d + 1 tokens: the longest first, from the old ones.
  for (int64_t d = std::min(depth, window_.size()) - 1; d >= 1; --d) {
    const int32_t prev = active_[static_cast<size_t>(d - 1)];
    active_[static_cast<size_t>(d)] = prev == SuffixTrie::kNone ? SuffixTrie::kNone : trie_.Extend(prev, token);
  }
  active_[0] = trie_.Extend(SuffixTrie::kRoot, token);
  if (cache_ == nullptr) return;
  const SuffixTrie& cache = cache_->trie();
  for (size_t d = cache_active_.size() - 1; d >= 1; --d) {
    const SuffixTrie::NodeRef prev = cache_active_[d - 1];
    const int32_t c = cache.Valid(prev) ? cache.Child(prev.node, token) : SuffixTrie::kNone;
    cache_active_[d] = c == SuffixTrie::kNone ? SuffixTrie::NodeRef{} : cache.Ref(c);
  }
  const int32_t c = cache.Child(SuffixTrie::kRoot, token);
  cache_active_[0] = c == SuffixTrie::kNone ? SuffixTrie::NodeRef{} : cache.Ref(c);
}

SuffixProposer::Proposal SuffixProposer::Walk(SuffixTrie& trie, int32_t node, int32_t match_length,
                                              std::span<int32_t> out) const {
  const double adaptive = std::floor(options_.max_spec_factor * match_length + options_.max_spec_offset);
  const int64_t limit = std::min<int64_t>(
      {options_.num_speculative_tokens, static_cast<int64_t>(out.size()),
       adaptive <= 0 ? 0 : static_cast<int64_t>(std::min(adaptive, 64.0))});
  Proposal p{.match_length = match_length};
  double prob = 1;
  while (p.num_tokens < limit) {
    const int32_t c = trie.BestChild(node);
    if (c == SuffixTrie::kNone) break;
    prob *= static_cast<double>(trie.count(c)) / static_cast<double>(trie.continuations(node));
    if (prob < options_.min_token_prob) break;
    out[static_cast<size_t>(p.num_tokens++)] = trie.token(c);
    p.score += prob;
    node = c;
  }
  return p;
}

int64_t SuffixProposer::MaxMatch(int32_t max_depth, size_t room) const {
  const int64_t chain = std::min<int64_t>(options_.num_speculative_tokens, static_cast<int64_t>(room));
  return std::min<int64_t>(std::max<int64_t>(1, max_depth - chain), window_.size());
}

SuffixProposer::Proposal SuffixProposer::Propose(std::span<int32_t> out) {
  Proposal best;
  // Local: the longest active suffix with a continuation that leaves the chain
  // room (a string of max_depth tokens has no children).
  for (int64_t d = MaxMatch(options_.max_depth, out.size()); d >= 1; --d) {
    const int32_t node = active_[static_cast<size_t>(d - 1)];
    if (node != SuffixTrie::kNone && trie_.continuations(node) > 0) {
      best = Walk(trie_, node, static_cast<int32_t>(d), out);
      break;
    }
  }
  if (cache_ == nullptr) return best;
  SuffixTrie& cache = cache_->trie();
  for (int64_t d = MaxMatch(cache_->options().max_depth, out.size()); d >= 1; --d) {
    const SuffixTrie::NodeRef ref = cache_active_[static_cast<size_t>(d - 1)];
    if (!cache.Valid(ref) || cache.continuations(ref.node) == 0) continue;
    const std::span<int32_t> other = std::span<int32_t>(scratch_).first(std::min(scratch_.size(), out.size()));
    Proposal p = Walk(cache, ref.node, static_cast<int32_t>(d), other);
    if (p.score > best.score) {
      std::copy_n(other.begin(), p.num_tokens, out.begin());
      p.from_cache = true;
      best = p;
    }
    break;
  }
  return best;
}

}  // namespace tpserve::speculative
