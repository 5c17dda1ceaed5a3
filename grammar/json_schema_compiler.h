// The JSON Schema compiler's types and state (internal to json_schema.cc,
// json_schema_analysis.cc and json_schema_emit.cc, one file per pass; the
// passes are described in json_schema.cc).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grammar/grammar.h"
#include "grammar/json_schema_number.h"
#include "grammar/json_schema_regex.h"
#include "grammar/spec.h"
#include "nlohmann/json.hpp"

namespace tpserve::grammar::json_internal {

using json = nlohmann::ordered_json;

// Instance types. A JSON "number" is kInt | kFrac: integers spelled as
// integers, and numbers spelled with a fraction or an exponent.
enum : uint8_t {
  kNull = 1,
  kBool = 2,
  kInt = 4,
  kFrac = 8,
  kStr = 16,
  kArr = 32,
  kObj = 64,
  kAllTypes = 127,
};

constexpr int kTrue = 0;               // the conj of no schemas: any value
constexpr size_t kMaxAlternatives = 64;  // anyOf / oneOf combinations of one conj
constexpr int kMaxFlattenDepth = 256;    // anyOf / $ref chains at one instance level
constexpr int64_t kMaxMultiples = 256;   // values a multipleOf range may enumerate
constexpr int64_t kMaxCountStates = 4096;  // (member, count) states of minProperties / maxProperties
// A run of more than kLongRun characters of one class (maxLength 4000, or a
// pattern's [a-z]{1,500}) is not one terminal, whose automaton would need a
// state per count: it becomes chunks of kChunk characters repeated by rules
// (GrammarBuilder::Repeat: O(log n) rules), and a shorter tail.
// A string with one such run is first tried as one counted terminal
// (counted_dfa.h: the run's table and a counter, at most kMaxCountedStates
// states); the chunks are the fallback when counting would not be exact.
constexpr int64_t kLongRun = 48;
constexpr int64_t kChunk = 16;
constexpr int64_t kMaxCountedStates = 4096;

inline std::string Join(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

inline absl::Status Refuse(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(path.empty() ? std::string(what) : absl::StrCat(path, ": ", what));
}

// ---- JSON values ----

Dec NumberDec(const json& v);
// A string equal for values JSON Schema calls equal (numbers by value,
// object members in any order), for enum sets.
std::string EqualityKey(const json& v);
// The value as the layout writes it, nested `depth` levels deep.
std::string Serialize(const json& v, JsonLayout layout, int depth);
// A string as a JSON string literal, in the grammar's spelling.
std::string Quote(absl::string_view s);

// ---- the constraints of one schema (or of several merged) ----

struct Pattern {
  Re re;
  std::string source;  // "pattern ^a+$" or "format date"
  std::string where;
};

struct Local {
  uint8_t types = kAllTypes;
  bool has_enum = false;
  std::vector<const json*> enum_values;  // distinct values, in the schema's order
  std::shared_ptr<const absl::flat_hash_set<std::string>> enum_keys;  // EqualityKey of each
  std::optional<NumBound> lower, upper;
  int64_t multiple_of = 0;  // an integer >= 2; 0: none
  int64_t min_len = 0, max_len = -1;
  std::vector<Pattern> patterns;  // pattern and format: all must hold
  std::vector<int> prefix;        // conjs of the first items
  int items = kTrue;              // conj of the items after `prefix`
  int64_t min_items = 0, max_items = -1;
  std::vector<std::pair<std::string, int>> props;  // in `properties` order
  std::vector<std::string> required;
  int additional = kTrue;
  int64_t min_props = 0, max_props = -1;  // members counted (max < 0: any number)
  std::string where;  // the schema path these constraints came from (first)

  bool Unconstrained() const {
    return types == kAllTypes && !has_enum && !lower && !upper && multiple_of == 0 && min_len == 0 &&
           max_len < 0 && patterns.empty() && prefix.empty() && items == kTrue && min_items == 0 &&
           max_items < 0 && props.empty() && required.empty() && additional == kTrue && min_props == 0 &&
           max_props < 0;
  }
};

// Restricts `local` to `values` (intersected with its enum, if it has one).
void SetEnum(Local& local, const std::vector<const json*>& values);

struct Group {
  bool one_of = false;
  std::vector<int> branches;  // node ids
  std::string where;
};

struct Node {
  const json* j = nullptr;
  std::string path;
  std::string base;  // base URI for $ref
  bool parsed = false;
  Local local;
  std::vector<int> conjuncts;  // allOf members and $ref targets (node ids)
  std::vector<Group> groups;
};

// What the analysis knows of one alternative.
struct AltInfo {
  uint8_t types = 0;  // the types whose own constraints can be met
  std::vector<const json*> enum_ok;
  IntRange ints;
  FracRange fracs;
  std::vector<std::string> multiples;  // multipleOf: regexes of the integers allowed (a list or a pattern)
  Re string_re;                // the string's value language
};

// One member of an object's chain.
struct Member {
  std::string name;
  int conj;
  bool required;
};

struct OneOfCheck {
  std::string where;
  std::vector<std::vector<Local>> branches;  // merged alternatives of each branch
};

// The array / object part of an alternative can be met when the items and
// members it requires can (`holds` says which conjs can).
bool ArrayFeasible(const Local& alt, const std::function<bool(int)>& holds);
bool ObjectFeasible(const Local& alt, const std::function<bool(int)>& holds);

class Compiler {
 public:
  // Rules go into `builder` (the caller's: the grammar may be part of a larger
  // one); the value sits `depth` levels deep (the indented layout's indent).
  Compiler(const json& root, JsonLayout layout, const CompileLimits& limits, absl::Time deadline,
           GrammarBuilder& builder, int depth)
      : root_(root), layout_(layout), limits_(limits), deadline_(deadline), base_depth_(depth), builder_(builder) {
    conj_ids_.emplace(std::vector<int>{}, kTrue);
    conjs_.push_back({});
  }

  // The rule of the schema's values.
  absl::StatusOr<Symbol> Run();
  // Any JSON object, for JsonObjectGrammar.
  absl::StatusOr<Symbol> RunAnyObject();

 private:
  // ---- pass 1: nodes ----
  absl::Status IndexIds();
  int NodeAt(const json* j, std::string path, std::string base);
  absl::StatusOr<int> Resolve(const std::string& base, const std::string& ref, const std::string& where);
  absl::Status Parse(int id);
  // What Parse gathers from one schema object, keyword by keyword (json_schema.cc).
  struct Keywords;
  absl::Status ParseKeyword(const std::string& key, const json& value, Keywords& k);
  absl::Status ParseNumberKeyword(const std::string& key, const json& value, Keywords& k);
  absl::Status ParseStringKeyword(const std::string& key, const json& value, Keywords& k);
  absl::Status ParseArrayKeyword(const std::string& key, const json& value, Keywords& k);
  absl::Status ParseObjectKeyword(const std::string& key, const json& value, Keywords& k);
  absl::Status ParseCombinator(const std::string& key, const json& value, Keywords& k);
  absl::Status FinishKeywords(Keywords& k);
  absl::StatusOr<int> ChildConj(const json& j, const std::string& path, const std::string& base);
  absl::Status Tick();

  // ---- pass 2: conjs ----
  int Intern(std::vector<int> members);
  int Union(int a, int b);
  absl::StatusOr<const std::vector<Local>*> Flatten(int conj);
  absl::StatusOr<std::vector<int>> Closure(const std::vector<int>& members);
  absl::StatusOr<std::vector<Local>> ExpandGroup(const Group& g, const std::vector<Local>& alts);
  absl::StatusOr<Local> Merge(const Local& a, const Local& b);

  // ---- pass 3: analysis ----
  absl::Status Discover(int root);
  absl::Status Analyze(int conj);
  absl::StatusOr<AltInfo> AnalyzeAlt(const Local& alt);
  absl::StatusOr<bool> Validate(const json& v, int conj, int depth);
  // in_enum: `v` is known to be one of alt's enum values.
  absl::StatusOr<bool> ValidateLocal(const json& v, const Local& alt, int depth, bool in_enum = false);
  bool AltNonempty(const Local& alt, const AltInfo& info) const;
  int MemberConj(const Local& alt, const std::string& name) const;
  int ItemConj(const Local& alt, int64_t i) const;
  absl::StatusOr<bool> Disjoint(const Local& a, const Local& b, int depth);
  absl::StatusOr<bool> ConjDisjoint(int a, int b, int depth);
  absl::Status CheckOneOfs();

  // ---- pass 4: emission ----
  bool NonemptyAt(int conj, int depth);
  bool AltNonemptyAt(const Local& alt, const AltInfo& info, int depth);
  Symbol EmitConj(int conj, int depth);
  absl::Status FillConj(int conj, int depth, Symbol rule);
  std::vector<std::vector<Symbol>> EmitAlt(const Local& alt, const AltInfo& info, int depth);
  std::vector<Symbol> EmitObject(const Local& alt, int depth);
  std::vector<Symbol> EmitCountedObject(const Local& alt, const std::vector<Member>& members,
                                        const std::vector<std::u32string>& names, bool extra, int depth);
  std::vector<Symbol> EmitArray(const Local& alt, int depth);
  std::vector<Symbol> EmitString(const Re& value);
  Symbol CountedUnits(const CodepointRanges& set, int64_t min, int64_t max);
  bool CountsExactly(const std::string& regex) const;  // BuildCountedDfa takes it
  Symbol AnyValue(int depth);
  Symbol AnyObject(int depth);
  Symbol Term(std::string regex, std::string name = "");
  absl::Status Drain();
  std::string Indent(int depth) const { return std::string(static_cast<size_t>(2 * depth), ' '); }
  bool Indented() const { return layout_ == JsonLayout::kIndented; }
  int DepthKey(int depth) const { return Indented() ? depth : 0; }

  const json& root_;
  JsonLayout layout_;
  CompileLimits limits_;
  absl::Time deadline_;
  int ticks_ = 0;
  bool legacy_refs_ = false;  // draft 4 to 7: $ref ignores its siblings

  std::vector<Node> nodes_;
  absl::flat_hash_map<const json*, int> node_ids_;
  std::map<std::string, std::pair<const json*, std::string>> ids_;  // absolute $id / anchor URI -> schema, path

  std::vector<std::vector<int>> conjs_;
  std::map<std::vector<int>, int> conj_ids_;
  std::unordered_map<int, std::vector<Local>> flat_;  // node-based: Flatten's pointers outlive inserts
  absl::flat_hash_set<int> flattening_;
  int flatten_depth_ = 0;
  std::vector<OneOfCheck> one_ofs_;

  std::vector<int> discovered_;
  std::unordered_map<int, std::vector<AltInfo>> infos_;  // node-based, as flat_
  absl::flat_hash_map<int, bool> nonempty_;

  int base_depth_ = 0;
  GrammarBuilder& builder_;
  std::map<std::pair<int, int>, Symbol> rules_;  // (conj, depth)
  std::map<std::pair<int, int>, bool> nonempty_at_;
  std::deque<std::tuple<int, int, Symbol>> pending_;
  std::map<int, Symbol> any_values_, any_objects_;
  size_t regex_bytes_ = 0;
};

}  // namespace tpserve::grammar::json_internal
