// What compiled grammars of one vocabulary share (internal to the grammar
// engine), thread-safe:
//   * terminal automata by regex: a regex compiles once per process and
//     vocabulary (the JSON string and number lexemes recur in every schema);
//   * lexer masks by automaton state: the tokens allowed from a terminal
//     automaton's state without ending the lexeme (lexer_mask.h), computed
//     once and reused by every grammar that reaches the same state class.
// Both are bounded; past the bound the cache is emptied (entries in use stay
// alive through their shared_ptr). Ids are never reused, so a stale key never
// finds another terminal's mask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grammar/dfa.h"

namespace tpserve::grammar::internal {

struct LexerMask;

// Which trie a lexer mask covers (vocabulary_impl.h).
enum class TrieKind : uint8_t { kShort, kLong };

// A terminal's automaton as the lexer uses it: the empty string removed (an
// empty lexeme is the grammar's business: the symbol becomes optional).
struct TerminalAutomaton {
  uint64_t id = 0;            // unique for the life of the process
  Dfa dfa;                    // the regex's language without ""
  bool matches_empty = false; // the regex matched ""
  bool matches_nothing = false;  // the regex matched no string at all
  // [base states] DepthClasses to short_depth (and to long_depth when
  // counted; the loop state distinguished).
  std::vector<int32_t> short_class, long_class;
  int short_depth = 0, long_depth = 0;

  // The lexer-mask key of `state` over the short trie: states of one class
  // have one mask (the count enters only as min(count to lo, depth) and
  // min(count to hi, depth)). Over the long trie: the state itself, or for a
  // counted automaton its class to long_depth.
  int32_t ShortClass(int32_t state) const;
  int32_t LongClass(int32_t state) const;
  int32_t Class(TrieKind kind, int32_t state) const {
    return kind == TrieKind::kShort ? ShortClass(state) : LongClass(state);
  }
};

class TokenTrie;

class LexerCache {
 public:
  // short_depth, long_depth: the depths of the short and long tries (their
  // longest tokens), in bytes.
  LexerCache(int short_depth, int long_depth) : short_depth_(short_depth), long_depth_(long_depth) {}

  // max_states: the compile's limit for this one automaton's base states.
  // counted_only: fail unless it compiles to a counted automaton (counted_dfa.h).
  absl::StatusOr<std::shared_ptr<const TerminalAutomaton>> Automaton(const std::string& regex, int64_t max_states,
                                                                     absl::Time deadline, bool counted_only = false);

  // The lexer mask of `automaton` in `state` over `trie` (of kind `kind`),
  // cached by (automaton id, its ShortClass or LongClass). A miss is computed
  // outside the lock: from a reference, a cached mask of another state that
  // gives the same subtrees below most of the root's children (a state of
  // this automaton of the same class there; over the short trie also one of
  // any automaton, by EquivalentStates), else by a walk of the whole trie,
  // which then becomes a reference.
  std::shared_ptr<const LexerMask> Mask(TrieKind kind, const std::shared_ptr<const TerminalAutomaton>& automaton,
                                        int32_t state, const TokenTrie& trie, int32_t vocab_size);

  // How the masks computed so far were computed (tests, benchmarks).
  struct Stats {
    int64_t walks = 0;       // a walk of the whole trie
    int64_t from_same = 0;   // from a reference of the same automaton
    int64_t from_other = 0;  // from a reference of another automaton
  };
  Stats stats() const;

  static constexpr size_t kMaxAutomatonBytes = 256u << 20;
  static constexpr size_t kMaxMaskBytes = 512u << 20;

 private:
  // A mask computed by a whole walk, and the state it was computed for.
  struct Reference {
    std::shared_ptr<const TerminalAutomaton> automaton;
    int32_t state;
    std::shared_ptr<const LexerMask> mask;
  };
  static constexpr size_t kMaxReferences = 4;          // per automaton and trie
  static constexpr size_t kMaxSharedReferences = 8;    // of any automaton, over the short trie
  static constexpr int64_t kMinReferenceScan = 4096;   // trie nodes: a walk worth reusing
  static constexpr int64_t kPairBudget = 256;          // EquivalentStates' pairs, per call
  // The (automaton id, class) key of a mask.
  using Key = std::pair<uint64_t, int32_t>;

  std::shared_ptr<const LexerMask> Compute(TrieKind kind, const std::shared_ptr<const TerminalAutomaton>& automaton,
                                           int32_t state, const TokenTrie& trie, int32_t vocab_size);
  // The root's children (their bytes in `again`) whose subtrees `reference`
  // cannot give for (automaton, state), and their nodes; `limit` as soon as
  // they reach it.
  static int64_t Differences(TrieKind kind, const TerminalAutomaton& automaton, int32_t state, const Reference& reference,
                             const TokenTrie& trie, int64_t limit, std::array<bool, 256>& again);
  void Insert(TrieKind kind, Key key, std::shared_ptr<const LexerMask>& mask, std::optional<Reference> reference);

  const int short_depth_, long_depth_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const TerminalAutomaton>> automata_ ABSL_GUARDED_BY(mu_);
  size_t automaton_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<Key, std::shared_ptr<const LexerMask>> masks_[2] ABSL_GUARDED_BY(mu_);  // [TrieKind]
  absl::flat_hash_map<uint64_t, std::vector<Reference>> references_[2] ABSL_GUARDED_BY(mu_);  // [TrieKind] by automaton id
  std::vector<Reference> shared_references_ ABSL_GUARDED_BY(mu_);  // the short trie's, any automaton
  size_t next_shared_ ABSL_GUARDED_BY(mu_) = 0;                     // the one replaced next when full
  size_t mask_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tpserve::grammar::internal
