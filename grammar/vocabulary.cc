// Vocabulary::Create and VocabularyImpl: validation, the trie, the caches.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grammar/vocabulary_impl.h"

namespace tpserve::grammar {
namespace internal {

VocabularyImpl::VocabularyImpl(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids,
                               std::vector<bool> special)
    : bytes_(std::move(token_bytes)),
      stop_ids_(std::move(stop_ids)),
      special_(std::move(special)),
      is_stop_(bytes_.size(), false) {
  for (int32_t id : stop_ids_) is_stop_[static_cast<size_t>(id)] = true;
  std::vector<bool> short_tokens(bytes_.size()), long_tokens(bytes_.size());
  for (size_t t = 0; t < bytes_.size(); ++t) {
    const bool include = !special_[t] && !is_stop_[t] && !bytes_[t].empty() && bytes_[t].size() <= kMaxTokenBytes;
    short_tokens[t] = include && bytes_[t].size() <= static_cast<size_t>(kShortTokenBytes);
    long_tokens[t] = include && bytes_[t].size() > static_cast<size_t>(kShortTokenBytes);
  }
  short_trie_ = std::make_unique<TokenTrie>(bytes_, short_tokens);
  long_trie_ = std::make_unique<TokenTrie>(bytes_, long_tokens);
  in_trie_.resize(bytes_.size());
  for (size_t t = 0; t < bytes_.size(); ++t) in_trie_[t] = short_trie_->contains()[t] || long_trie_->contains()[t];
  cache_ = std::make_unique<LexerCache>(kShortTokenBytes, std::max(long_trie_->max_depth(), kShortTokenBytes + 1));
}

std::shared_ptr<const VocabularyImpl> AsImpl(std::shared_ptr<const Vocabulary> vocabulary) {
  if (auto impl = std::dynamic_pointer_cast<const VocabularyImpl>(vocabulary)) return impl;
  std::vector<std::string> bytes(static_cast<size_t>(vocabulary->size()));
  std::vector<bool> special(bytes.size());
  for (int32_t t = 0; t < vocabulary->size(); ++t) {
    bytes[static_cast<size_t>(t)] = vocabulary->bytes(t);
    special[static_cast<size_t>(t)] = vocabulary->special(t);
  }
  return std::make_shared<const VocabularyImpl>(std::move(bytes), vocabulary->stop_ids(), std::move(special));
}

}  // namespace internal

absl::StatusOr<std::shared_ptr<const Vocabulary>> Vocabulary::Create(std::vector<std::string> token_bytes,
                                                                     std::vector<int32_t> stop_ids,
                                                                     std::vector<bool> special) {
  if (special.size() != token_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary: ", token_bytes.size(), " token byte strings but ",
                                                   special.size(), " special flags"));
  }
  if (token_bytes.size() > static_cast<size_t>(INT32_MAX)) return absl::InvalidArgumentError("vocabulary too large");
  for (int32_t id : stop_ids) {
    if (id < 0 || static_cast<size_t>(id) >= token_bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary: stop id ", id, " is outside [0, ", token_bytes.size(), ")"));
    }
  }
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  return std::shared_ptr<const Vocabulary>(
      std::make_shared<const internal::VocabularyImpl>(std::move(token_bytes), std::move(stop_ids), std::move(special)));
}

}  // namespace tpserve::grammar
