// The one implementation of Vocabulary (internal to the grammar engine): the
// ids' bytes, stop and special ids, the token trie, and the caches compiled
// grammars of this vocabulary share (lexer_cache.h).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "grammar/lexer_cache.h"
#include "grammar/token_trie.h"
#include "grammar/vocabulary.h"

namespace tpserve::grammar::internal {

// Tokens longer than this are left out of the tries (never allowed): no real
// vocabulary has one, and it bounds the depth of every trie walk.
inline constexpr size_t kMaxTokenBytes = 1024;
// Tokens up to this many bytes are in the short trie, longer ones in the long
// trie (about 1% of a 128k vocabulary). A lexer mask over the short trie
// depends only on the automaton's state up to strings of this length
// (DepthClasses), so the states of a counted run far from its bound share it;
// the long trie is small enough to walk per exact state.
inline constexpr int kShortTokenBytes = 16;

class VocabularyImpl final : public Vocabulary {
 public:
  VocabularyImpl(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids, std::vector<bool> special);

  int32_t size() const override { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const override { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& stop_ids() const override { return stop_ids_; }
  bool special(int32_t id) const override { return special_[static_cast<size_t>(id)]; }

  bool is_stop(int32_t id) const { return is_stop_[static_cast<size_t>(id)]; }
  // The id may appear in constrained output (it is in a trie).
  bool in_trie(int32_t id) const { return in_trie_[static_cast<size_t>(id)]; }
  const TokenTrie& short_trie() const { return *short_trie_; }  // tokens of <= kShortTokenBytes bytes
  const TokenTrie& long_trie() const { return *long_trie_; }    // the longer ones
  int max_token_bytes() const { return std::max(short_trie_->max_depth(), long_trie_->max_depth()); }
  LexerCache& cache() const { return *cache_; }

 private:
  std::vector<std::string> bytes_;  // [V]
  std::vector<int32_t> stop_ids_;
  std::vector<bool> special_;       // [V]
  std::vector<bool> is_stop_;       // [V]
  std::vector<bool> in_trie_;       // [V]
  std::unique_ptr<TokenTrie> short_trie_;
  std::unique_ptr<TokenTrie> long_trie_;
  std::unique_ptr<LexerCache> cache_;
};

// `vocabulary` as a VocabularyImpl: itself when it is one, else a copy.
std::shared_ptr<const VocabularyImpl> AsImpl(std::shared_ptr<const Vocabulary> vocabulary);

}  // namespace tpserve::grammar::internal
