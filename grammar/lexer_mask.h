// The part of a token mask that depends only on one lexeme's automaton state
// (internal to the grammar engine; XGrammar's "context-independent" tokens):
// the tokens whose bytes stay inside a lexeme from that state, and the trie
// nodes where the lexeme may end with bytes of the token still to come (there
// the parser decides, so the matcher walks on from those nodes itself).
// Computed by one walk of the token trie, or from the mask of another state
// of the same automaton by walking again only the subtrees where the two
// differ; cached per (automaton, state class) (lexer_cache.h). A lexer state
// of several lexemes allows the union of their masks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/dfa.h"
#include "grammar/token_trie.h"

namespace tpserve::grammar::internal {

struct LexerMask {
  // Where the lexeme may end inside a token: the children of the trie nodes
  // where its automaton accepts, grouped by their byte, so that a walk from
  // there visits only children whose byte can start a lexeme.
  struct Ends {
    std::array<int32_t, 257> begin{};  // children of byte b: children[begin[b], begin[b + 1])
    std::vector<int32_t> children;     // trie nodes
  };
  int64_t count = 0;              // tokens allowed
  int64_t scanned = 0;            // trie nodes the walks that computed it visited
  // ... and those below the subtrees they took whole (TrieShortcut): the
  // nodes a walk without shortcuts would visit, in LexerCache's units of cost.
  int64_t covered = 0;
  std::vector<uint32_t> words;    // [MaskWords(V)] the allowed tokens, when many (else empty)
  std::vector<int32_t> tokens;    // the allowed tokens, when few (words empty)
  // Words [word_begin, word_end) hold every allowed token (empty when none):
  // OrInto touches no word outside them.
  size_t word_begin = 0, word_end = 0;
  std::vector<int32_t> end_nodes; // the trie nodes of `ends` (parents of its children), in preorder
  Ends ends;                      // children empty: the lexeme never ends inside a token

  // Sets the allowed tokens' bits in `out` ([MaskWords(V)]), reading and
  // writing words [word_begin, word_end) only.
  void OrInto(uint32_t* out) const;
  size_t MemoryBytes() const {
    return sizeof(*this) + words.size() * 4 + tokens.size() * 4 + end_nodes.size() * 4 + ends.children.size() * 4;
  }
};

// One automaton state.
struct LexerEntry {
  const Dfa* dfa;
  int32_t state;
};

// The LexerMask of `entry` over `trie` (a vocabulary of `vocab_size` ids): a walk of the whole trie.
std::shared_ptr<const LexerMask> ComputeLexerMask(const LexerEntry& entry, const TokenTrie& trie, int32_t vocab_size);

// The same, from `reference`, the LexerMask of another state of the same
// automaton: the subtrees of the root's children whose byte b has
// recompute[b] set are walked from `entry`, the others copied. The caller
// sets recompute[b] unless both states lead over b to states no string of
// up to trie.max_depth() - 1 bytes tells apart (or both to dead).
std::shared_ptr<const LexerMask> ComputeLexerMaskFrom(const LexerEntry& entry, const LexerMask& reference,
                                                      const std::array<bool, 256>& recompute, const TokenTrie& trie,
                                                      int32_t vocab_size);

}  // namespace tpserve::grammar::internal
