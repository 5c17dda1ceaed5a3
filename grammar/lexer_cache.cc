// LexerCache: two maps under one mutex. An automaton is compiled outside the
// lock (compiling may take milliseconds); if two threads compile the same
// regex at once, the first to insert wins and both use it.
#include "grammar/lexer_cache.h"

#include <algorithm>
#include <optional>

#include "absl/hash/hash.h"
#include "grammar/counted_dfa.h"
#include "grammar/lexer_mask.h"
#include "grammar/regex_ast.h"

namespace tpserve::grammar::internal {

size_t LexerCache::KeyHash::operator()(const LexerKey& key) const { return absl::HashOf(key); }

namespace {

int32_t Encode(const Dfa& dfa, const std::vector<int32_t>& base_class, int depth, int32_t state) {
  const Counter& c = dfa.counter;
  if (state == c.fresh) return -2;  // no class of a base state
  const int32_t base = dfa.num_states();
  const int32_t q = state % base;
  const int64_t k = state / base;
  const uint8_t region = c.region[static_cast<size_t>(q)];
  int64_t lo = 0, hi = 0;
  if (region == Counter::kC || region == Counter::kLoop) {
    lo = std::min<int64_t>(std::max<int64_t>(c.lo - k, 0), depth + 1);
    hi = std::min<int64_t>(c.hi - k, depth + 1);
  }
  const int64_t width = depth + 2;
  return static_cast<int32_t>((base_class[static_cast<size_t>(q)] * 4 + region) * width * width + lo * width + hi);
}

constexpr int64_t kClassBudget = int64_t{1} << 26;

}  // namespace

int32_t TerminalAutomaton::ShortClass(int32_t state) const {
  if (!dfa.counted) return short_class[static_cast<size_t>(state)];
  return Encode(dfa, short_class, short_depth, state);
}

int32_t TerminalAutomaton::LongClass(int32_t state) const {
  if (!dfa.counted) return state;
  return Encode(dfa, long_class, long_depth, state);
}

absl::StatusOr<std::shared_ptr<const TerminalAutomaton>> LexerCache::Automaton(const std::string& regex,
                                                                               int64_t max_states,
                                                                               absl::Time deadline,
                                                                               bool counted_only) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = automata_.find(regex); it != automata_.end()) {
      // A cached automaton larger than this compile allows is still refused.
      if (it->second->dfa.num_states() <= max_states && (it->second->dfa.counted || !counted_only)) return it->second;
    }
  }
  absl::StatusOr<RegexAst> ast = ParseRegex(regex);
  if (!ast.ok()) return ast.status();
  std::optional<Dfa> counted = BuildCountedDfa(*ast, max_states, deadline);
  if (!counted && counted_only) return absl::FailedPreconditionError("not a counted automaton");
  absl::StatusOr<Dfa> dfa = counted ? *std::move(counted) : CompileRegexAst(*ast, max_states, deadline);
  if (!dfa.ok()) return dfa.status();
  auto automaton = std::make_shared<TerminalAutomaton>();
  automaton->matches_empty = dfa->MatchesEmpty();
  automaton->matches_nothing = dfa->start < 0;
  automaton->dfa = WithoutEmpty(*dfa);
  automaton->short_depth = short_depth_;
  automaton->long_depth = long_depth_;
  const int32_t loop = automaton->dfa.counted ? automaton->dfa.counter.loop : -1;
  automaton->short_class = DepthClasses(automaton->dfa, short_depth_, kClassBudget, loop);
  if (automaton->dfa.counted) automaton->long_class = DepthClasses(automaton->dfa, long_depth_, kClassBudget, loop);
  const size_t bytes = automaton->dfa.MemoryBytes() + (automaton->short_class.size() + automaton->long_class.size()) * 4 +
                       regex.size();
  absl::MutexLock lock(&mu_);
  automaton->id = next_id_++;
  if (automaton_bytes_ + bytes > kMaxAutomatonBytes) {
    automata_.clear();
    automaton_bytes_ = 0;
  }
  auto [it, inserted] = automata_.try_emplace(regex, automaton);
  if (inserted) {
    automaton_bytes_ += bytes;
  } else if (it->second->dfa.num_states() > max_states || (counted_only && !it->second->dfa.counted)) {
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
