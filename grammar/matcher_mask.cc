// FillMask: the cached part of the mask for the lexer state (lexer_mask.h),
// then a walk of the trie below each node where a lexeme may end inside a
// token, through the parser (virtual chart sets pushed and popped), and the
// stop ids when the output is complete.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "grammar/matcher_state.h"

namespace tpserve::grammar {

using internal::Completion;
using internal::LexerMask;
using internal::TrieNode;

void Matcher::State::Walk(const internal::TokenTrie& trie, int32_t node, std::span<const LexEntry> entries,
                          uint32_t* words) {
  if (OverBudget()) return;
  const std::vector<TrieNode>& nodes = trie.nodes();
  const TrieNode& n = nodes[static_cast<size_t>(node)];
  std::vector<LexEntry>& next = walk_entries[n.depth];
  std::vector<Completion>& done = walk_done[n.depth];
  next.clear();
  done.clear();
  Advance(entries, n.byte, next, done);
  if (next.empty() && done.empty()) return;
  for (int32_t k = 0; k < n.num_tokens; ++k) Allow(trie.token_ids()[n.token_begin + k], words);
  if (n.skip == node + 1) return;  // no children
  const size_t mark = chart.size();
  if (!done.empty()) Boundary(done, next);
  for (int32_t c = node + 1; c < n.skip; c = nodes[static_cast<size_t>(c)].skip) Walk(trie, c, next, words);
  chart.resize(mark);
}

void Matcher::State::WalkEnds(const internal::TokenTrie& trie, std::span<const Completion> completions,
                              const LexerMask::Ends& ends, uint32_t* words) {
  if (OverBudget()) return;
  std::shared_ptr<const internal::EarleySet> set = deriver.Derive(chart, completions);
  if (set->terminals.empty()) return;
  const size_t mark = chart.size();
  std::vector<LexEntry> starts;
  for (int32_t t : set->terminals) {
    starts.push_back({static_cast<int32_t>(mark), t, compiled->automata[static_cast<size_t>(t)]->dfa.start});
  }
  const internal::ByteSet first = set->first_bytes;
  chart.push_back({std::move(set), {}, {}});
  for (int b = 0; b < 256; ++b) {
    if ((first[static_cast<size_t>(b / 64)] >> (b % 64) & 1) == 0) continue;
    for (int32_t k = ends.begin[static_cast<size_t>(b)]; k < ends.begin[static_cast<size_t>(b) + 1]; ++k) {
      Walk(trie, ends.children[static_cast<size_t>(k)], starts, words);
    }
  }
  chart.resize(mark);
}

// Each distinct (automaton, class) of the active lexemes contributes its
// cached mask once, and walks on through the parser from its end nodes once:
// the lexemes of one class end at the same nodes, and the set after all of
// them is the union of the sets after each (an ambiguous grammar has many,
// from different chart sets), so one walk allows what theirs would.
void Matcher::State::ApplyLexerMask(internal::TrieKind kind, uint32_t* words) {
  const internal::TokenTrie& trie = kind == internal::TrieKind::kShort ? vocabulary.short_trie() : vocabulary.long_trie();
  mask_groups.clear();
  for (const LexEntry& e : active) {
    const std::shared_ptr<const internal::TerminalAutomaton>& a = compiled->automata[static_cast<size_t>(e.terminal)];
    const std::pair<uint64_t, int32_t> key{a->id, a->Class(kind, e.state)};
    auto group = std::find_if(mask_groups.begin(), mask_groups.end(), [&](const MaskGroup& g) { return g.key == key; });
    if (group == mask_groups.end()) {
      mask_groups.push_back({key, vocabulary.cache().Mask(kind, a, e.state, trie, vocabulary.size()), {}});
      group = mask_groups.end() - 1;
    }
    group->completions.push_back({e.set, e.terminal});
  }
  for (const MaskGroup& g : mask_groups) {
    g.mask->OrInto(words);
    if (g.mask->word_begin < g.mask->word_end) {
      touched.begin = std::min(touched.begin, g.mask->word_begin);
      touched.end = std::max(touched.end, g.mask->word_end);
    }
    if (!g.mask->ends.children.empty()) WalkEnds(trie, g.completions, g.mask->ends, words);
  }
}

MaskRange Matcher::State::FillMask(std::span<uint32_t> words, MaskRange dirty) {
  TPSERVE_CHECK(words.size() >= MaskWords(vocabulary.size()));
  uint32_t* w = words.data();
  dirty.end = std::min(dirty.end, words.size());
  if (dirty.begin < dirty.end) std::memset(w + dirty.begin, 0, (dirty.end - dirty.begin) * sizeof(uint32_t));
  touched = {words.size(), 0};
  if (!status.ok()) return {};
  const uint64_t made = deriver.items_made(), limit = compiled->max_mask_items;
  mask_items_end = limit > UINT64_MAX - made ? UINT64_MAX : made + limit;  // a limit of SIZE_MAX: none
  if (!stopped) {
    ApplyLexerMask(internal::TrieKind::kShort, w);
    ApplyLexerMask(internal::TrieKind::kLong, w);
  }
  if (OverBudget()) {  // what was allowed so far is not the mask: none of it stays
    status = absl::InvalidArgumentError(absl::StrCat(
        "the grammar is too ambiguous to constrain this output: a token mask needed more than ",
        compiled->max_mask_items, " parser items (CompileLimits::max_mask_items; real JSON schemas need a few hundred). "
        "Its lexemes may end almost anywhere inside tokens (as in `x ::= [a-z]+ x?`): write such a run as one "
        "terminal (`[a-z]+`), or put a separator between the lexemes"));
    const size_t begin = std::min(dirty.begin, touched.begin), end = std::max(dirty.end, touched.end);
    if (begin < end) std::memset(w + begin, 0, (end - begin) * sizeof(uint32_t));
    return {};
  }
  if (Complete()) {
    for (int32_t t : vocabulary.stop_ids()) Allow(t, w);
  }
  return touched.begin < touched.end ? touched : MaskRange{};
}

}  // namespace tpserve::grammar
