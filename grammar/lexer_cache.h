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
  // [states] DepthClasses to the short trie's depth: states of one class have
  // one lexer mask over the short trie (the states of x{0,200} far from the bound).
  std::vector<int32_t> mask_class;
};

// Which trie a lexer mask covers (vocabulary_impl.h).
enum class TrieKind : uint8_t { kShort, kLong };

// A lexer state: (terminal id, state) pairs, sorted, unique; the state is the
// mask class for the short trie and the automaton state for the long one.
using LexerKey = std::vector<std::pair<uint64_t, int32_t>>;

class LexerCache {
 public:
  // mask_depth: the short trie's depth (its longest token), in bytes.
  explicit LexerCache(int mask_depth) : mask_depth_(mask_depth) {}

  // max_states: the compile's limit for this one automaton.
  absl::StatusOr<std::shared_ptr<const TerminalAutomaton>> Automaton(const std::string& regex, int64_t max_states,
                                                                     absl::Time deadline);
  std::shared_ptr<const LexerMask> FindMask(TrieKind trie, const LexerKey& key) const;
  // Returns the mask now cached for `key` (`mask`, or one another thread put first).
  std::shared_ptr<const LexerMask> InsertMask(TrieKind trie, LexerKey key, std::shared_ptr<const LexerMask> mask);

  static constexpr size_t kMaxAutomatonBytes = 256u << 20;
  static constexpr size_t kMaxMaskBytes = 512u << 20;

 private:
  struct KeyHash {
    size_t operator()(const LexerKey& key) const;
  };
  const int mask_depth_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const TerminalAutomaton>> automata_ ABSL_GUARDED_BY(mu_);
  size_t automaton_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<LexerKey, std::shared_ptr<const LexerMask>, KeyHash> masks_[2] ABSL_GUARDED_BY(mu_);
  size_t mask_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tpserve::grammar::internal
