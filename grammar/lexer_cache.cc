// LexerCache: maps under one mutex. An automaton or a mask is computed
// outside the lock (that may take milliseconds); if two threads compute the
// same one at once, the first to insert wins and both use it.
#include "grammar/lexer_cache.h"

#include <algorithm>
#include <array>
#include <optional>

#include "grammar/counted_dfa.h"
#include "grammar/lexer_mask.h"
#include "grammar/regex_ast.h"

namespace tpserve::grammar::internal {

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

std::shared_ptr<const LexerMask> LexerCache::Mask(TrieKind kind, const std::shared_ptr<const TerminalAutomaton>& automaton,
                                                  int32_t state, const TokenTrie& trie, int32_t vocab_size) {
  {
    absl::MutexLock lock(&mu_);
    const auto& masks = masks_[static_cast<int>(kind)];
    if (auto it = masks.find(Key{automaton->id, automaton->Class(kind, state)}); it != masks.end()) return it->second;
  }
  return Compute(kind, automaton, state, trie, vocab_size);
}

int64_t LexerCache::Differences(TrieKind kind, const TerminalAutomaton& automaton, int32_t state,
                                const Reference& reference, const TokenTrie& trie, int64_t limit,
                                std::array<bool, 256>& again) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  const Dfa& dfa = automaton.dfa;
  const Dfa& other = reference.automaton->dfa;
  const bool same = reference.automaton->id == automaton.id;
  std::vector<std::pair<std::pair<int32_t, int32_t>, bool>> known;  // (q, s) pairs decided
  again = {};
  int64_t cost = 0;
  for (int pass = 0; pass < 2; ++pass) {  // liveness first: cheap, and often enough to give up
    for (int32_t c = 1; c < static_cast<int32_t>(nodes.size()); c = nodes[static_cast<size_t>(c)].skip) {
      const uint8_t b = nodes[static_cast<size_t>(c)].byte;
      const int32_t q = dfa.Next(state, b), s = other.Next(reference.state, b);
      bool differs = (q < 0) != (s < 0);  // pass 0: liveness
      if (pass == 1) {                     // pass 1: the subtrees live from both
        if (q < 0 || s < 0) continue;
        if (same && automaton.Class(kind, q) == automaton.Class(kind, s)) continue;
        if (kind == TrieKind::kLong) {  // the long trie's subtrees are deep: only a state of the same class will do
          differs = true;
        } else {
          auto it = std::find_if(known.begin(), known.end(), [&](const auto& k) { return k.first == std::make_pair(q, s); });
          if (it == known.end()) {
            known.push_back({{q, s}, EquivalentStates(dfa, q, other, s, trie.max_depth() - 1, kPairBudget)});
            it = known.end() - 1;
          }
          differs = !it->second;
        }
      }
      if (!differs) continue;
      again[b] = true;
      cost += nodes[static_cast<size_t>(c)].skip - c;
      if (cost >= limit) return limit;
    }
  }
  return cost;
}

std::shared_ptr<const LexerMask> LexerCache::Compute(TrieKind kind, const std::shared_ptr<const TerminalAutomaton>& automaton,
                                                     int32_t state, const TokenTrie& trie, int32_t vocab_size) {
  std::vector<Reference> references;
  {
    absl::MutexLock lock(&mu_);
    const auto& by_automaton = references_[static_cast<int>(kind)];
    if (auto it = by_automaton.find(automaton->id); it != by_automaton.end()) references = it->second;
    if (kind == TrieKind::kShort) references.insert(references.end(), shared_references_.begin(), shared_references_.end());
  }
  // The reference that leaves the fewest nodes to walk again, when that is
  // under half of what its own walk covered (visited or took whole).
  const Reference* best = nullptr;
  std::array<bool, 256> best_again{}, again{};
  int64_t best_cost = 0;
  for (const Reference& r : references) {
    const int64_t limit = best != nullptr ? best_cost : r.mask->covered / 2;
    const int64_t cost = Differences(kind, *automaton, state, r, trie, limit, again);
    if (cost < limit) best = &r, best_again = again, best_cost = cost;
  }
  const LexerEntry entry{&automaton->dfa, state};
  std::shared_ptr<const LexerMask> mask = best != nullptr
                                              ? ComputeLexerMaskFrom(entry, *best->mask, best_again, trie, vocab_size)
                                              : ComputeLexerMask(entry, trie, vocab_size);
  std::optional<Reference> reference;
  if (best == nullptr && mask->covered >= kMinReferenceScan) reference = Reference{automaton, state, mask};
  {
    absl::MutexLock lock(&mu_);
    ++(best == nullptr ? stats_.walks : best->automaton->id == automaton->id ? stats_.from_same : stats_.from_other);
  }
  Insert(kind, {automaton->id, automaton->Class(kind, state)}, mask, std::move(reference));
  return mask;
}

LexerCache::Stats LexerCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void LexerCache::Insert(TrieKind kind, Key key, std::shared_ptr<const LexerMask>& mask, std::optional<Reference> reference) {
  const size_t bytes = mask->MemoryBytes() + sizeof(key);
  const int k = static_cast<int>(kind);
  absl::MutexLock lock(&mu_);
  if (mask_bytes_ + bytes > kMaxMaskBytes) {
    for (int t = 0; t < 2; ++t) masks_[t].clear(), references_[t].clear();
    shared_references_.clear();
    mask_bytes_ = 0;
  }
  auto [it, inserted] = masks_[k].try_emplace(key, mask);
  if (!inserted) {
    mask = it->second;  // another thread's, first
    return;
  }
  mask_bytes_ += bytes;
  if (!reference) return;
  std::vector<Reference>& references = references_[k][key.first];
  if (references.size() < kMaxReferences) references.push_back(*reference);
  if (kind != TrieKind::kShort) return;
  if (shared_references_.size() < kMaxSharedReferences) {
    shared_references_.push_back(*std::move(reference));
  } else {
    shared_references_[next_shared_++ % kMaxSharedReferences] = *std::move(reference);
  }
}

}  // namespace tpserve::grammar::internal
