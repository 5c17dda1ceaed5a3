// What compiled grammars of one vocabulary share (internal to the grammar
// engine), thread-safe:
//   * terminal automata by regex: a regex compiles once per process and
//     vocabulary (the JSON string and number lexemes recur in every schema);
//   * lexer masks by lexer state: the tokens allowed from a set of terminal
//     automaton states without ending a lexeme (lexer_mask.h), computed once
//     and reused by every grammar that reaches the same state.
// Both are bounded; past the bound the cache is emptied (entries in use stay
// alive through their shared_ptr). Ids are never reused, so a stale key never
// finds another terminal's mask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
};

// Which trie a lexer mask covers (vocabulary_impl.h).
enum class TrieKind : uint8_t { kShort, kLong };

// A lexer state: (terminal id, state) pairs, sorted, unique; the state is the
// mask class for the short trie and the automaton state for the long one.
using LexerKey = std::vector<std::pair<uint64_t, int32_t>>;

class LexerCache {
 public:
  // short_depth, long_depth: the depths of the short and long tries (their
  // longest tokens), in bytes.
  LexerCache(int short_depth, int long_depth) : short_depth_(short_depth), long_depth_(long_depth) {}

  // max_states: the compile's limit for this one automaton's base states.
  // counted_only: fail unless it compiles to a counted automaton (counted_dfa.h).
  absl::StatusOr<std::shared_ptr<const TerminalAutomaton>> Automaton(const std::string& regex, int64_t max_states,
                                                                     absl::Time deadline, bool counted_only = false);
  std::shared_ptr<const LexerMask> FindMask(TrieKind trie, const LexerKey& key) const;
  // Returns the mask now cached for `key` (`mask`, or one another thread put first).
  std::shared_ptr<const LexerMask> InsertMask(TrieKind trie, LexerKey key, std::shared_ptr<const LexerMask> mask);

  static constexpr size_t kMaxAutomatonBytes = 256u << 20;
  static constexpr size_t kMaxMaskBytes = 512u << 20;

 private:
  struct KeyHash {
    size_t operator()(const LexerKey& key) const;
  };
  const int short_depth_, long_depth_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const TerminalAutomaton>> automata_ ABSL_GUARDED_BY(mu_);
  size_t automaton_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<LexerKey, std::shared_ptr<const LexerMask>, KeyHash> masks_[2] ABSL_GUARDED_BY(mu_);
  size_t mask_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tpserve::grammar::internal
