// The part of a token mask that depends only on the lexer state (internal to
// the grammar engine; XGrammar's "context-independent" tokens): from a set of
// terminal automaton states, the tokens whose bytes stay inside a lexeme of
// one of them, and the trie nodes where a lexeme may end with bytes of the
// token still to come (there the parser decides, so the matcher walks on from
// those nodes itself). Computed by one walk of the token trie, cached per
// lexer state (lexer_cache.h).
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
  // Where entry `entry`'s lexeme may end inside a token: the children of the
  // trie nodes where its automaton accepts, grouped by their byte, so that a
  // walk from there visits only children whose byte can start a lexeme.
  struct Ends {
    int32_t entry = 0;                 // index into the lexer state
    std::array<int32_t, 257> begin{};  // children of byte b: children[begin[b], begin[b + 1])
    std::vector<int32_t> children;     // trie nodes
  };
  int64_t count = 0;              // tokens allowed
  std::vector<uint32_t> words;    // [MaskWords(V)] the allowed tokens, when many (else empty)
  std::vector<int32_t> tokens;    // the allowed tokens, when few (words empty)
  std::vector<Ends> ends;         // entries whose lexeme may end inside some token

  size_t MemoryBytes() const {
    size_t bytes = sizeof(*this) + words.size() * 4 + tokens.size() * 4;
    for (const Ends& e : ends) bytes += sizeof(Ends) + e.children.size() * 4;
    return bytes;
  }
};

// One automaton state of a lexer state.
struct LexerEntry {
  const Dfa* dfa;
  int32_t state;
};

// The LexerMask of `entries` over `trie` (a vocabulary of `vocab_size` ids).
std::shared_ptr<const LexerMask> ComputeLexerMask(std::span<const LexerEntry> entries, const TokenTrie& trie,
                                                  int32_t vocab_size);

}  // namespace tpserve::grammar::internal
