#include "speculative/proposer_set.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve::speculative {

absl::Status ValidateProposerConfig(const ProposerConfig& c) {
  if (c.method != "ngram" && c.method != "suffix" && c.method != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative-method: \"", c.method, "\" is none of ngram, suffix, off"));
  }
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num-speculative-tokens: ", c.num_speculative_tokens, " is outside [1, 16]"));
  }
  if (c.method == "ngram") {
    TPSERVE_RETURN_IF_ERROR(ValidateNgramOptions({.prompt_lookup_min = c.prompt_lookup_min,
                                                  .prompt_lookup_max = c.prompt_lookup_max,
                                                  .num_speculative_tokens = c.num_speculative_tokens}));
  }
  return absl::OkStatus();
}

absl::StatusOr<ProposerSet> ProposerSet::Create(const ProposerConfig& config, ProposerFactory factory) {
  TPSERVE_RETURN_IF_ERROR(ValidateProposerConfig(config));
  if (config.method == "off") {
    return absl::InvalidArgumentError("ProposerSet: method \"off\" proposes nothing; make no set for it");
  }
  ProposerSet set(config);
  set.factory_ = std::move(factory);
  if (config.method == "suffix" && !set.factory_) {
    TPSERVE_ASSIGN_OR_RETURN(SuffixCache cache, SuffixCache::Create({}));
    set.suffix_cache_ = std::make_unique<SuffixCache>(std::move(cache));
  }
  if (!set.factory_) TPSERVE_RETURN_IF_ERROR(set.MakeOne(0).status());  // the proposers' own options, checked once
  return set;
}

absl::StatusOr<std::unique_ptr<Proposer>> ProposerSet::MakeOne(uint64_t seq_id) {
  if (factory_) return factory_(seq_id);
  if (config_.method == "suffix") {
    SuffixOptions o;
    o.num_speculative_tokens = config_.num_speculative_tokens;
    TPSERVE_ASSIGN_OR_RETURN(SuffixProposer p, SuffixProposer::Create(o, suffix_cache_.get()));
    return MakeProposer(std::move(p));
  }
  TPSERVE_ASSIGN_OR_RETURN(NgramProposer p,
                           NgramProposer::Create({.prompt_lookup_min = config_.prompt_lookup_min,
                                                  .prompt_lookup_max = config_.prompt_lookup_max,
                                                  .num_speculative_tokens = config_.num_speculative_tokens}));
  return MakeProposer(std::move(p));
}

void ProposerSet::Add(uint64_t seq_id) {
  absl::StatusOr<std::unique_ptr<Proposer>> proposer = MakeOne(seq_id);
  if (!proposer.ok() || *proposer == nullptr) return;  // checked by Create: cannot fail
  seqs_.insert_or_assign(seq_id, State{.proposer = *std::move(proposer)});
}

void ProposerSet::Remove(uint64_t seq_id, std::span<const int32_t> output) {
  if (seqs_.erase(seq_id) > 0 && suffix_cache_ != nullptr && !output.empty()) suffix_cache_->AddOutput(output);
}

void ProposerSet::Append(uint64_t seq_id, std::span<const int32_t> tokens) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || tokens.empty()) return;
  it->second.proposer->Append(tokens);
  it->second.fed += std::ssize(tokens);
}

int32_t ProposerSet::Propose(uint64_t seq_id, std::span<int32_t> out) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return 0;
  const size_t room = std::min<size_t>(out.size(), static_cast<size_t>(config_.num_speculative_tokens));
  if (room == 0) return 0;
  return it->second.proposer->Propose(out.first(room));
}

int64_t ProposerSet::fed(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : it->second.fed;
}

}  // namespace tpserve::speculative
