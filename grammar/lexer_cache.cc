// LexerCache: two maps under one mutex. An automaton is compiled outside the
// lock (compiling may take milliseconds); if two threads compile the same
// regex at once, the first to insert wins and both use it.
#include "grammar/lexer_cache.h"

#include "absl/hash/hash.h"
#include "grammar/lexer_mask.h"

namespace tpserve::grammar::internal {

size_t LexerCache::KeyHash::operator()(const LexerKey& key) const { return absl::HashOf(key); }

absl::StatusOr<std::shared_ptr<const TerminalAutomaton>> LexerCache::Automaton(const std::string& regex,
                                                                               int64_t max_states,
                                                                               absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = automata_.find(regex); it != automata_.end()) {
      // A cached automaton larger than this compile allows is still refused.
      if (it->second->dfa.num_states() <= max_states) return it->second;
    }
  }
  absl::StatusOr<Dfa> dfa = CompileRegex(regex, max_states, deadline);
  if (!dfa.ok()) return dfa.status();
  auto automaton = std::make_shared<TerminalAutomaton>();
  automaton->matches_empty = dfa->MatchesEmpty();
  automaton->matches_nothing = dfa->start < 0;
  automaton->dfa = WithoutEmpty(*dfa);
  automaton->mask_class = DepthClasses(automaton->dfa, mask_depth_, /*budget=*/int64_t{1} << 26);
  const size_t bytes = automaton->dfa.MemoryBytes() + automaton->mask_class.size() * 4 + regex.size();
  absl::MutexLock lock(&mu_);
  automaton->id = next_id_++;
  if (automaton_bytes_ + bytes > kMaxAutomatonBytes) {
    automata_.clear();
    automaton_bytes_ = 0;
  }
  auto [it, inserted] = automata_.try_emplace(regex, automaton);
  if (inserted) {
    automaton_bytes_ += bytes;
  } else if (it->second->dfa.num_states() > max_states) {
    return std::shared_ptr<const TerminalAutomaton>(std::move(automaton));
  }
  return it->second;
}

std::shared_ptr<const LexerMask> LexerCache::FindMask(TrieKind trie, const LexerKey& key) const {
  absl::MutexLock lock(&mu_);
  const auto& masks = masks_[static_cast<int>(trie)];
  auto it = masks.find(key);
  return it == masks.end() ? nullptr : it->second;
}

std::shared_ptr<const LexerMask> LexerCache::InsertMask(TrieKind trie, LexerKey key,
                                                        std::shared_ptr<const LexerMask> mask) {
  const size_t bytes = mask->MemoryBytes() + key.size() * sizeof(key[0]);
  absl::MutexLock lock(&mu_);
  if (mask_bytes_ + bytes > kMaxMaskBytes) {
    masks_[0].clear();
    masks_[1].clear();
    mask_bytes_ = 0;
  }
  auto [it, inserted] = masks_[static_cast<int>(trie)].try_emplace(std::move(key), std::move(mask));
  if (inserted) mask_bytes_ += bytes;
  return it->second;
}

}  // namespace tpserve::grammar::internal
