// What a Matcher holds (internal to the grammar engine): the chart, the
// lexemes in progress, the history that Rollback pops, and the scratch of the
// mask walks. Accept and Rollback are in matcher.cc, FillMask in
// matcher_mask.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "grammar/compiled_grammar.h"
#include "grammar/lexer_mask.h"
#include "grammar/matcher.h"

namespace tpserve::grammar {

// A lexeme of `terminal` in progress since chart set `set`, its automaton in `state`.
struct LexEntry {
  int32_t set;
  int32_t terminal;
  int32_t state;
};

struct Matcher::State {
  explicit State(std::shared_ptr<const CompiledGrammar> compiled);

  // ---- the parse (matcher.cc) ----
  // Steps `from` over `byte` into `to`; lexemes that end are added to `done`.
  void Advance(std::span<const LexEntry> from, uint8_t byte, std::vector<LexEntry>& to,
               std::vector<internal::Completion>& done) const;
  // The lexemes in `done` end here: pushes the set after them on the chart and
  // the lexemes that may start there onto `to`. Returns the set's index.
  int32_t Boundary(std::span<const internal::Completion> done, std::vector<LexEntry>& to);
  bool Complete() const;
  bool Accept(int32_t token);

  // ---- the mask (matcher_mask.cc) ----
  // Matcher::FillMask(words, dirty).
  MaskRange FillMask(std::span<uint32_t> words, MaskRange dirty);
  // Sets token t's bit and widens `touched` to its word.
  void Allow(int32_t t, uint32_t* words) {
    const auto w = static_cast<size_t>(t / 32);
    words[w] |= 1u << (t % 32);
    touched.begin = std::min(touched.begin, w);
    touched.end = std::max(touched.end, w + 1);
  }
  // The active lexemes' lexer masks over one trie, then the tokens that end a
  // lexeme inside them.
  void ApplyLexerMask(internal::TrieKind kind, uint32_t* words);
  // Continues the lexemes in `entries` over trie node `node` and its subtree,
  // setting the bits of the tokens that stay viable.
  void Walk(const internal::TokenTrie& trie, int32_t node, std::span<const LexEntry> entries, uint32_t* words);
  // Tokens in which lexemes end (`completions`, of one mask: the same end
  // nodes), the walk going on through the parser from the set after them.
  void WalkEnds(const internal::TokenTrie& trie, std::span<const internal::Completion> completions,
                const internal::LexerMask::Ends& ends, uint32_t* words);
  // This FillMask's walk has made more parser items than max_mask_items.
  bool OverBudget() const { return deriver.items_made() > mask_items_end; }

  std::shared_ptr<const CompiledGrammar> compiled;
  const internal::VocabularyImpl& vocabulary;
  const internal::ParserTables& tables;
  internal::EarleyDeriver deriver;

  std::vector<internal::ChartSet> chart;  // [sets] one per position where a lexeme ended
  std::vector<LexEntry> active;           // lexemes in progress
  int32_t current = 0;                    // the set at the current position, -1 when no lexeme ends here
  bool stopped = false;                   // a stop id was accepted
  absl::Status status;                    // Matcher::status(): not OK once a mask passed max_mask_items
  uint64_t mask_items_end = 0;            // FillMask: the deriver's items_made() it may reach

  struct Saved {
    size_t chart_size;
    std::vector<LexEntry> active;
    int32_t current;
    bool stopped;
  };
  std::vector<Saved> history;  // [accepted] the state before each token

  std::optional<std::optional<int32_t>> forced;  // ForcedToken at this position, once computed
  std::vector<uint32_t> scratch_words;            // ForcedToken's mask
  MaskRange touched;                              // FillMask: the words set so far (begin > end: none)
  // ApplyLexerMask's active lexemes grouped by their mask: (automaton id, class).
  struct MaskGroup {
    std::pair<uint64_t, int32_t> key;
    std::shared_ptr<const internal::LexerMask> mask;
    std::vector<internal::Completion> completions;  // the group's lexemes, were they to end
  };
  std::vector<MaskGroup> mask_groups;
  std::vector<std::vector<LexEntry>> walk_entries;             // [depth] Walk's lexemes
  std::vector<std::vector<internal::Completion>> walk_done;    // [depth] Walk's ended lexemes
};

}  // namespace tpserve::grammar
