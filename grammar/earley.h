// The Earley recognizer over lexemes (internal to the grammar engine).
//
// The chart has one set per position where a lexeme ended (plus the start);
// a lexeme of terminal t that started at set i and ends now moves the items of
// set i waiting on t into a new set, closed by completion and prediction. So
// a lexeme boundary the grammar allows at several places is read every way at
// once: the chart is indexed by where lexemes end, not by lexeme count.
// Nullable rules follow Aycock and Horspool (the predicting item also skips a
// nullable rule), so a set's closure never needs its own completed items.
// A new set depends only on set i and t (and older sets), so it is memoised in
// set i (ChartSet::derived) and shared by every walk that ends t there.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace tpserve::grammar::internal {

inline constexpr int32_t kEnd = INT32_MIN;  // ParserTables::next: the dot is at the end
inline constexpr int32_t kSelf = -1;        // Item::origin: the set that holds the item

using ByteSet = std::array<uint64_t, 4>;  // bit b of word b / 64: byte b

struct Item {
  int32_t pos;     // a dotted position (ParserTables)
  int32_t origin;  // the chart set where the rule started, or kSelf
};

// The grammar as the parser reads it: every alternative's dotted positions
// numbered, P in all.
struct ParserTables {
  std::vector<int32_t> next;        // [P] after the dot: rule r (>= 0), terminal t as ~t (< 0), or kEnd
  std::vector<int32_t> rule_of;     // [P] the rule of the alternative
  std::vector<int32_t> rule_first;  // [R + 1] rule r's dot-0 positions: starts[rule_first[r], rule_first[r + 1])
  std::vector<int32_t> starts;      // dot-0 positions grouped by rule
  std::vector<uint8_t> nullable;    // [R] the rule derives ""
  std::vector<ByteSet> first_bytes; // [T] the bytes terminal t may start with
  int32_t start_rule = 0;

  int32_t num_rules() const { return static_cast<int32_t>(nullable.size()); }
  int32_t num_terminals() const { return static_cast<int32_t>(first_bytes.size()); }
};

// One chart set's content, independent of where it sits in the chart.
struct EarleySet {
  std::vector<Item> items;         // sorted by ParserTables::next[pos]
  std::vector<int32_t> terminals;  // sorted, unique: the terminals after a dot (lexemes that may start here)
  bool complete = false;           // the start rule is complete from set 0: the input is a sentence
  ByteSet first_bytes{};           // the bytes those terminals may start with
};

// A lexeme of `terminal` that started at chart set `set` and ends here.
struct Completion {
  int32_t set;
  int32_t terminal;
  friend bool operator==(const Completion&, const Completion&) = default;
  friend auto operator<=>(const Completion&, const Completion&) = default;
};

struct ChartSet {
  std::shared_ptr<const EarleySet> set;
  std::vector<std::pair<int32_t, std::shared_ptr<const EarleySet>>> derived;  // memo: terminal -> the set after it
  // Memo of several lexemes ending at once (an ambiguous grammar: a lexeme
  // from each of many sets), kept in the newest of their sets: the completions
  // (sorted) -> the set after them.
  std::vector<std::pair<std::vector<Completion>, std::shared_ptr<const EarleySet>>> derived_many;
};

// Builds sets; holds scratch buffers (one per Matcher, one thread).
class EarleyDeriver {
 public:
  explicit EarleyDeriver(const ParserTables& tables);

  // The first set: the start rule predicted.
  std::shared_ptr<const EarleySet> Initial();
  // The set after `completions` (lexemes ending at the position chart.size()
  // will hold). Memoised in the origin set when there is one completion, in
  // the newest origin set when there are more.
  std::shared_ptr<const EarleySet> Derive(std::vector<ChartSet>& chart, std::span<const Completion> completions);
  // Items this deriver has made in all (the work of its Derive calls: a memo hit makes none).
  uint64_t items_made() const { return items_made_; }

 private:
  void Add(int32_t pos, int32_t origin);
  void Close(const std::vector<ChartSet>& chart, EarleySet& out);
  std::shared_ptr<const EarleySet> Finish(EarleySet out);

  const ParserTables& tables_;
  std::vector<Item> items_;
  absl::flat_hash_set<uint64_t> seen_;
  std::vector<uint32_t> predicted_;  // [R] generation stamp
  uint32_t generation_ = 0;
  uint64_t items_made_ = 0;
};

// The items of `set` whose dot is before `symbol` (ParserTables::next encoding).
std::span<const Item> Waiting(const ParserTables& tables, const EarleySet& set, int32_t symbol);

}  // namespace tpserve::grammar::internal
