// JSON Schema to the grammar IR (json_schema.h). Four passes:
//
//   1. Nodes: each schema object reached (from the root, through keywords and
//      $ref) is read once into its own constraints (`Local`), its allOf / $ref
//      conjuncts and its anyOf / oneOf groups. Unsupported keywords fail here,
//      naming their path.
//   2. Flattening: a conjunction of nodes (a "conj": the schemas one value
//      must satisfy at once) becomes a list of alternatives, each one `Local`
//      (allOf and $ref merged in, anyOf / oneOf distributed over). Children
//      (items, property values) are conjs again, flattened when reached.
//   3. Analysis: which conjs can hold any value at all (a least fixpoint, so
//      that a $ref cycle with no way out is empty), the string and number
//      regexes, enum values kept only when they satisfy their siblings, and
//      the proof that oneOf branches cannot overlap.
//   4. Emission: one rule per conj (per conj and depth in the indented layout,
//      whose whitespace depends on depth), terminals for scalars, a chain of
//      rules for objects so that optional properties cost O(n) rules.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grammar/json_schema_number.h"
#include "grammar/json_schema_regex.h"
#include "json/strict_json.h"
#include "nlohmann/json.hpp"

namespace tpserve::grammar {
namespace {

using json = nlohmann::ordered_json;
using namespace json_internal;  // NOLINT

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
constexpr int64_t kLongRun = 48;
constexpr int64_t kChunk = 16;

std::string Join(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

absl::Status Refuse(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(path.empty() ? std::string(what) : absl::StrCat(path, ": ", what));
}

// ---- JSON values ----

Dec NumberDec(const json& v) {
  if (v.is_number_unsigned()) return DecFromUint(v.get<uint64_t>());
  if (v.is_number_integer()) return DecFromInt(v.get<int64_t>());
  return ExactDec(v.get<double>());
}

// A string equal for values JSON Schema calls equal (numbers by value,
// object members in any order), for enum sets.
std::string EqualityKey(const json& v) {
  if (v.is_number()) return "n" + NumberDec(v).Text();
  if (v.is_array()) {
    std::string key = "[";
    for (const json& x : v) absl::StrAppend(&key, EqualityKey(x), ",");
    return key + "]";
  }
  if (v.is_object()) {
    std::vector<std::pair<std::string, std::string>> members;
    for (const auto& [k, x] : v.items()) members.emplace_back(json(k).dump(), EqualityKey(x));
    std::sort(members.begin(), members.end());
    std::string key = "{";
    for (const auto& [k, x] : members) absl::StrAppend(&key, k, ":", x, ",");
    return key + "}";
  }
  return v.dump();
}

// The value as the layout writes it, nested `depth` levels deep.
std::string Serialize(const json& v, JsonLayout layout, int depth) {
  if (layout == JsonLayout::kCompact) return v.dump();
  std::string text = v.dump(2);
  if (depth == 0) return text;
  const std::string indent = "\n" + std::string(static_cast<size_t>(2 * depth), ' ');
  return absl::StrReplaceAll(text, {{"\n", indent}});
}

std::string Quote(absl::string_view s) { return json(std::string(s)).dump(); }

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
void SetEnum(Local& local, const std::vector<const json*>& values) {
  auto keys = std::make_shared<absl::flat_hash_set<std::string>>();
  std::vector<const json*> kept;
  for (const json* v : values) {
    std::string key = EqualityKey(*v);
    if (local.has_enum && !local.enum_keys->contains(key)) continue;
    if (keys->insert(std::move(key)).second) kept.push_back(v);
  }
  local.has_enum = true;
  local.enum_values = std::move(kept);
  local.enum_keys = std::move(keys);
}

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

// ---- URIs, just enough for $ref and $id ----

std::string StripFragment(absl::string_view uri) { return std::string(uri.substr(0, uri.find('#'))); }

bool HasScheme(absl::string_view uri) {
  const size_t colon = uri.find(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i) {
    const char c = uri[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.')) return false;
  }
  return std::isalpha(static_cast<unsigned char>(uri[0]));
}

std::string ResolveUri(const std::string& base, absl::string_view ref) {
  if (ref.empty()) return base;
  if (HasScheme(ref)) return std::string(ref);
  const std::string doc = StripFragment(base);
  if (ref[0] == '#') return doc + std::string(ref);
  if (ref[0] == '/') {
    const size_t scheme_end = doc.find("://");
    if (scheme_end == std::string::npos) return std::string(ref);
    const size_t path_start = doc.find('/', scheme_end + 3);
    return doc.substr(0, path_start) + std::string(ref);
  }
  const size_t slash = doc.rfind('/');
  return (slash == std::string::npos ? "" : doc.substr(0, slash + 1)) + std::string(ref);
}

std::optional<std::string> PercentDecode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int v = 0;
    for (size_t k = 1; k <= 2; ++k) {
      const char c = s[i + k];
      v *= 16;
      if (c >= '0' && c <= '9') {
        v += c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v += c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v += c - 'A' + 10;
      } else {
        return std::nullopt;
      }
    }
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

// Keywords that constrain instances and are not supported: refused by name.
const absl::flat_hash_set<absl::string_view>& RefusedKeywords() {
  static const auto* set = new absl::flat_hash_set<absl::string_view>{
      "not",           "patternProperties",     "propertyNames",     "dependencies",  "dependentRequired",
      "dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "contains",      "minContains",
      "maxContains",   "$dynamicRef",           "$recursiveRef",     "disallow",      "extends",
      "divisibleBy"};
  return *set;
}

// Standard formats that constrain strings and are not supported.
const absl::flat_hash_set<absl::string_view>& RefusedFormats() {
  static const auto* set = new absl::flat_hash_set<absl::string_view>{
      "duration", "idn-email", "idn-hostname", "iri", "iri-reference", "uri-template", "relative-json-pointer",
      "regex"};
  return *set;
}

class Compiler {
 public:
  Compiler(const json& root, JsonLayout layout, const CompileLimits& limits)
      : root_(root), layout_(layout), limits_(limits), deadline_(absl::Now() + limits.max_time) {
    conj_ids_.emplace(std::vector<int>{}, kTrue);
    conjs_.push_back({});
  }

  absl::StatusOr<Grammar> Run();
  // Any JSON object, for JsonObjectGrammar.
  absl::StatusOr<Grammar> RunAnyObject();

 private:
  // ---- pass 1: nodes ----
  absl::Status IndexIds();
  int NodeAt(const json* j, std::string path, std::string base);
  absl::StatusOr<int> Resolve(const std::string& base, const std::string& ref, const std::string& where);
  absl::Status Parse(int id);
  absl::StatusOr<int> ChildConj(const json& j, const std::string& path, const std::string& base);
  absl::Status Tick();

  // ---- pass 2: conjs ----
  int Intern(std::vector<int> members);
  int Union(int a, int b);
  absl::StatusOr<const std::vector<Local>*> Flatten(int conj);
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
  absl::flat_hash_map<int, std::vector<Local>> flat_;
  absl::flat_hash_set<int> flattening_;
  int flatten_depth_ = 0;
  std::vector<OneOfCheck> one_ofs_;

  std::vector<int> discovered_;
  absl::flat_hash_map<int, std::vector<AltInfo>> infos_;
  absl::flat_hash_map<int, bool> nonempty_;

  GrammarBuilder builder_;
  std::map<std::pair<int, int>, Symbol> rules_;  // (conj, depth)
  std::map<std::pair<int, int>, bool> nonempty_at_;
  std::deque<std::tuple<int, int, Symbol>> pending_;
  std::map<int, Symbol> any_values_, any_objects_;
  size_t regex_bytes_ = 0;
};

absl::Status Compiler::Tick() {
  if ((++ticks_ & 63) == 0 && absl::Now() > deadline_) {
    return absl::InvalidArgumentError(absl::StrCat("compiling the schema took longer than ",
                                                   absl::FormatDuration(limits_.max_time),
                                                   " (CompileLimits::max_time)"));
  }
  return absl::OkStatus();
}

// ---- pass 1 ----

// Records every $id (and $anchor, and draft 4's fragment ids) under its
// absolute URI, walking the keywords that hold schemas.
absl::Status Compiler::IndexIds() {
  struct Item {
    const json* j;
    std::string base;
    std::string path;
  };
  std::vector<Item> stack = {{&root_, "", ""}};
  static const absl::flat_hash_set<absl::string_view> kSchemaMaps = {"properties", "patternProperties", "$defs",
                                                                    "definitions", "dependentSchemas"};
  static const absl::flat_hash_set<absl::string_view> kSchemaLists = {"items", "prefixItems", "allOf", "anyOf",
                                                                     "oneOf"};
  static const absl::flat_hash_set<absl::string_view> kSchemas = {
      "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains", "propertyNames",
      "unevaluatedProperties", "unevaluatedItems", "items"};
  while (!stack.empty()) {
    if (auto s = Tick(); !s.ok()) return s;
    Item item = std::move(stack.back());
    stack.pop_back();
    if (!item.j->is_object()) continue;
    const json& o = *item.j;
    std::string base = item.base;
    for (const char* key : {"$id", "id"}) {
      auto it = o.find(key);
      if (it == o.end() || !it->is_string()) continue;
      if (absl::string_view(key) == "id" && o.contains("$id")) continue;
      const std::string id = it->get<std::string>();
      if (!id.empty() && id[0] != '#') {
        base = ResolveUri(base, id);
        ids_.try_emplace(StripFragment(base), item.j, item.path);
      } else if (!id.empty()) {
        ids_.try_emplace(ResolveUri(base, id), item.j, item.path);  // draft 4: "id": "#name"
      }
    }
    if (auto it = o.find("$anchor"); it != o.end() && it->is_string()) {
      ids_.try_emplace(ResolveUri(base, "#" + it->get<std::string>()), item.j, item.path);
    }
    for (const auto& [key, value] : o.items()) {
      const std::string path = Join(item.path, key);
      if (kSchemaMaps.contains(key) && value.is_object()) {
        for (const auto& [name, sub] : value.items()) stack.push_back({&sub, base, Join(path, name)});
      } else if (kSchemaLists.contains(key) && value.is_array()) {
        for (size_t i = 0; i < value.size(); ++i) stack.push_back({&value[i], base, Join(path, std::to_string(i))});
      } else if (kSchemas.contains(key)) {
        stack.push_back({&value, base, path});
      }
    }
  }
  return absl::OkStatus();
}

int Compiler::NodeAt(const json* j, std::string path, std::string base) {
  auto [it, inserted] = node_ids_.try_emplace(j, static_cast<int>(nodes_.size()));
  if (inserted) {
    Node node;
    node.j = j;
    node.path = std::move(path);
    node.base = std::move(base);
    nodes_.push_back(std::move(node));
  }
  return it->second;
}

absl::StatusOr<int> Compiler::Resolve(const std::string& base, const std::string& ref, const std::string& where) {
  const std::string uri = ResolveUri(base, ref);
  const size_t hash = uri.find('#');
  const std::string doc = uri.substr(0, hash);
  const std::string fragment = hash == std::string::npos ? "" : uri.substr(hash + 1);
  const json* resource = &root_;
  std::string resource_path;
  if (!doc.empty()) {
    auto it = ids_.find(doc);
    if (it == ids_.end()) {
      return Refuse(where, absl::StrCat("$ref \"", ref, "\": only references within the schema are supported"));
    }
    resource = it->second.first;
    resource_path = it->second.second;
  }
  if (fragment.empty()) return NodeAt(resource, resource_path, doc);
  if (fragment[0] != '/') {
    auto it = ids_.find(uri);
    if (it == ids_.end()) return Refuse(where, absl::StrCat("$ref \"", ref, "\": no schema has this anchor"));
    return NodeAt(it->second.first, it->second.second, doc);
  }
  const json* at = resource;
  std::string path = resource_path;
  for (const absl::string_view raw : absl::StrSplit(absl::string_view(fragment).substr(1), '/')) {
    auto decoded = PercentDecode(raw);
    if (!decoded) return Refuse(where, absl::StrCat("$ref \"", ref, "\": bad percent-encoding"));
    std::string token = absl::StrReplaceAll(*decoded, {{"~1", "/"}, {"~0", "~"}});
    if (at->is_object()) {
      auto it = at->find(token);
      if (it == at->end()) return Refuse(where, absl::StrCat("$ref \"", ref, "\": no such location"));
      at = &*it;
    } else if (at->is_array()) {
      size_t index = 0;
      if (token.empty() || !absl::SimpleAtoi(token, &index) || index >= at->size()) {
        return Refuse(where, absl::StrCat("$ref \"", ref, "\": no such location"));
      }
      at = &(*at)[index];
    } else {
      return Refuse(where, absl::StrCat("$ref \"", ref, "\": no such location"));
    }
    path = Join(path, token);
  }
  return NodeAt(at, path, doc.empty() ? base : doc);
}

absl::StatusOr<int> Compiler::ChildConj(const json& j, const std::string& path, const std::string& base) {
  if (!j.is_object() && !j.is_boolean()) return Refuse(path, "a schema must be an object or a boolean");
  if (j.is_boolean() && j.get<bool>()) return kTrue;
  return Intern({NodeAt(&j, path, base)});
}

absl::StatusOr<int64_t> Count(const json& v, const std::string& where) {
  if (v.is_number_unsigned()) {
    return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX / 4));
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  if (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>())) {
    return static_cast<int64_t>(std::min(v.get<double>(), static_cast<double>(INT64_MAX / 4)));
  }
  return Refuse(where, "must be a nonnegative integer");
}

NumBound BoundOf(const json& v, bool exclusive) {
  if (v.is_number_unsigned()) return BoundFromUint(v.get<uint64_t>(), exclusive);
  if (v.is_number_integer()) return BoundFromInt(v.get<int64_t>(), exclusive);
  return BoundFromDouble(v.get<double>(), exclusive);
}

void TightenLower(std::optional<NumBound>& into, const NumBound& b) {
  if (!into || CompareLower(b, *into) < 0) into = b;
}
void TightenUpper(std::optional<NumBound>& into, const NumBound& b) {
  if (!into || CompareUpper(b, *into) < 0) into = b;
}

absl::Status Compiler::Parse(int id) {
  if (nodes_[static_cast<size_t>(id)].parsed) return absl::OkStatus();
  if (auto s = Tick(); !s.ok()) return s;
  // Copies: NodeAt below may grow nodes_.
  const json& j = *nodes_[static_cast<size_t>(id)].j;
  const std::string path = nodes_[static_cast<size_t>(id)].path;
  std::string base = nodes_[static_cast<size_t>(id)].base;
  Local local;
  local.where = path;
  std::vector<int> conjuncts;
  std::vector<Group> groups;
  auto at = [&](absl::string_view key) { return Join(path, key); };
  auto finish = [&]() {
    Node& node = nodes_[static_cast<size_t>(id)];
    node.local = std::move(local);
    node.conjuncts = std::move(conjuncts);
    node.groups = std::move(groups);
    node.parsed = true;
    return absl::OkStatus();
  };
  if (j.is_boolean()) {
    if (!j.get<bool>()) local.types = 0;
    return finish();
  }
  if (!j.is_object()) return Refuse(path, "a schema must be an object or a boolean");
  for (const char* key : {"$id", "id"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string() && !it->get<std::string>().empty() && it->get<std::string>()[0] != '#') {
      if (absl::string_view(key) == "id" && j.contains("$id")) continue;
      base = ResolveUri(base, it->get<std::string>());
    }
  }
  if (auto it = j.find("$ref"); it != j.end() && it->is_string()) {
    auto target = Resolve(base, it->get<std::string>(), at("$ref"));
    if (!target.ok()) return target.status();
    conjuncts.push_back(*target);
    if (legacy_refs_) return finish();  // draft 4 to 7: siblings of $ref are ignored
  }

  const json* items_array = nullptr;
  const json* additional_items = nullptr;
  bool exclusive_min_flag = false, exclusive_max_flag = false;
  const json* minimum = nullptr;
  const json* maximum = nullptr;
  for (const auto& [key, value] : j.items()) {
    const std::string where = at(key);
    if (RefusedKeywords().contains(key)) return Refuse(where, "not supported");
    if (key == "if" && (j.contains("then") || j.contains("else"))) return Refuse(where, "not supported");
    if (key == "uniqueItems") {
      if (value.is_boolean() && value.get<bool>()) {
        auto max_items = j.find("maxItems");
        const bool trivial = max_items != j.end() && max_items->is_number() && max_items->get<double>() <= 1;
        if (!trivial) return Refuse(where, "not supported");
      }
    } else if (key == "minProperties" || key == "maxProperties") {
      auto n = Count(value, where);
      if (!n.ok()) return n.status();
      if (key == "minProperties") {
        local.min_props = std::max(local.min_props, *n);
      } else {
        local.max_props = local.max_props < 0 ? *n : std::min(local.max_props, *n);
      }
    } else if (key == "type") {
      uint8_t mask = 0;
      std::vector<const json*> names;
      if (value.is_string()) {
        names.push_back(&value);
      } else if (value.is_array()) {
        for (const json& v : value) names.push_back(&v);
      } else {
        return Refuse(where, "must be a string or an array of strings");
      }
      for (const json* name : names) {
        if (!name->is_string()) return Refuse(where, "must be a string or an array of strings");
        const std::string& t = name->get_ref<const std::string&>();
        if (t == "null") {
          mask |= kNull;
        } else if (t == "boolean") {
          mask |= kBool;
        } else if (t == "integer") {
          mask |= kInt;
        } else if (t == "number") {
          mask |= kInt | kFrac;
        } else if (t == "string") {
          mask |= kStr;
        } else if (t == "array") {
          mask |= kArr;
        } else if (t == "object") {
          mask |= kObj;
        } else {
          return Refuse(where, absl::StrCat("unknown type \"", t, "\""));
        }
      }
      local.types &= mask;
    } else if (key == "enum" || key == "const") {
      std::vector<const json*> values;
      if (key == "const") {
        values.push_back(&value);
      } else if (value.is_array()) {
        for (const json& v : value) values.push_back(&v);
      } else {
        return Refuse(where, "must be an array");
      }
      SetEnum(local, values);
    } else if (key == "multipleOf") {
      if (!value.is_number() || value.get<double>() <= 0) return Refuse(where, "must be a positive number");
      const Dec k = NumberDec(value);
      if (!k.IsInteger()) return Refuse(where, "not supported for a divisor that is not an integer");
      if (k.ip.size() > 15) return Refuse(where, "not supported for a divisor this large");
      const int64_t n = std::stoll(k.ip);
      if (n == 1) {
        local.types &= static_cast<uint8_t>(~kFrac);
      } else {
        local.multiple_of = n;
      }
    } else if (key == "minimum") {
      if (!value.is_number()) return Refuse(where, "must be a number");
      minimum = &value;
    } else if (key == "maximum") {
      if (!value.is_number()) return Refuse(where, "must be a number");
      maximum = &value;
    } else if (key == "exclusiveMinimum" || key == "exclusiveMaximum") {
      const bool lower = key == "exclusiveMinimum";
      if (value.is_boolean()) {
        (lower ? exclusive_min_flag : exclusive_max_flag) = value.get<bool>();
      } else if (value.is_number()) {
        if (lower) {
          TightenLower(local.lower, BoundOf(value, true));
        } else {
          TightenUpper(local.upper, BoundOf(value, true));
        }
      } else {
        return Refuse(where, "must be a number");
      }
    } else if (key == "minLength" || key == "maxLength") {
      auto n = Count(value, where);
      if (!n.ok()) return n.status();
      if (*n > static_cast<int64_t>(limits_.max_automaton_states)) {
        return Refuse(where, absl::StrCat(*n, " is more than the automaton limit of ", limits_.max_automaton_states,
                                          " states (CompileLimits::max_automaton_states)"));
      }
      if (key == "minLength") {
        local.min_len = std::max(local.min_len, *n);
      } else {
        local.max_len = local.max_len < 0 ? *n : std::min(local.max_len, *n);
      }
    } else if (key == "pattern") {
      if (!value.is_string()) return Refuse(where, "must be a string");
      auto re = ParseEcmaPattern(value.get<std::string>());
      if (!re.ok()) return Refuse(where, re.status().message());
      local.patterns.push_back({*std::move(re), absl::StrCat("pattern ", Quote(value.get<std::string>())), where});
    } else if (key == "format") {
      if (!value.is_string()) return Refuse(where, "must be a string");
      const std::string& f = value.get_ref<const std::string&>();
      if (auto re = FormatLanguage(f)) {
        local.patterns.push_back({*std::move(re), absl::StrCat("format ", Quote(f)), where});
      } else if (f == "int32" || f == "int64") {
        // ajv-formats: a number that is an integer within the range (strings are unaffected).
        local.types &= static_cast<uint8_t>(~kFrac);
        if (f == "int32") {
          TightenLower(local.lower, BoundFromInt(INT32_MIN, false));
          TightenUpper(local.upper, BoundFromInt(INT32_MAX, false));
        } else {
          TightenLower(local.lower, BoundFromDouble(-9007199254740991.0, false));
          TightenUpper(local.upper, BoundFromDouble(9007199254740991.0, false));
        }
      } else if (RefusedFormats().contains(f)) {
        return Refuse(where, absl::StrCat("format \"", f, "\" is not supported"));
      }
      // Any other format is an annotation (draft 2020-12): it constrains nothing.
    } else if (key == "items") {
      if (value.is_array()) {
        items_array = &value;
      } else {
        auto c = ChildConj(value, where, base);
        if (!c.ok()) return c.status();
        local.items = *c;
      }
    } else if (key == "prefixItems") {
      if (!value.is_array()) return Refuse(where, "must be an array");
      for (size_t i = 0; i < value.size(); ++i) {
        auto c = ChildConj(value[i], Join(where, std::to_string(i)), base);
        if (!c.ok()) return c.status();
        local.prefix.push_back(*c);
      }
    } else if (key == "additionalItems") {
      additional_items = &value;
    } else if (key == "minItems") {
      auto n = Count(value, where);
      if (!n.ok()) return n.status();
      if (*n > INT32_MAX) return Refuse(where, absl::StrCat(*n, " is more than ", INT32_MAX));
      local.min_items = std::max(local.min_items, *n);
    } else if (key == "maxItems") {
      auto n = Count(value, where);
      if (!n.ok()) return n.status();
      const int64_t m = std::min<int64_t>(*n, INT32_MAX);
      local.max_items = local.max_items < 0 ? m : std::min(local.max_items, m);
    } else if (key == "properties") {
      if (!value.is_object()) return Refuse(where, "must be an object");
      for (const auto& [name, sub] : value.items()) {
        auto c = ChildConj(sub, Join(where, name), base);
        if (!c.ok()) return c.status();
        local.props.emplace_back(name, *c);
      }
    } else if (key == "required") {
      if (!value.is_array()) {
        if (value.is_boolean()) continue;  // draft 3's boolean form: refused below by $schema
        return Refuse(where, "must be an array of strings");
      }
      for (const json& name : value) {
        if (!name.is_string()) return Refuse(where, "must be an array of strings");
        const std::string& n = name.get_ref<const std::string&>();
        if (std::find(local.required.begin(), local.required.end(), n) == local.required.end()) {
          local.required.push_back(n);
        }
      }
    } else if (key == "additionalProperties") {
      auto c = ChildConj(value, where, base);
      if (!c.ok()) return c.status();
      local.additional = *c;
    } else if (key == "allOf" || key == "anyOf" || key == "oneOf") {
      if (!value.is_array() || value.empty()) return Refuse(where, "must be a nonempty array");
      Group group{key == "oneOf", {}, where};
      for (size_t i = 0; i < value.size(); ++i) {
        const json& sub = value[i];
        if (!sub.is_object() && !sub.is_boolean()) {
          return Refuse(Join(where, std::to_string(i)), "a schema must be an object or a boolean");
        }
        group.branches.push_back(NodeAt(&sub, Join(where, std::to_string(i)), base));
      }
      if (key == "allOf") {
        conjuncts.insert(conjuncts.end(), group.branches.begin(), group.branches.end());
      } else {
        groups.push_back(std::move(group));
      }
    }
    // Anything else is an annotation or a keyword JSON Schema ignores.
  }
  if (minimum != nullptr) TightenLower(local.lower, BoundOf(*minimum, exclusive_min_flag));
  if (maximum != nullptr) TightenUpper(local.upper, BoundOf(*maximum, exclusive_max_flag));
  if (items_array != nullptr) {
    for (size_t i = 0; i < items_array->size(); ++i) {
      auto c = ChildConj((*items_array)[i], Join(at("items"), std::to_string(i)), base);
      if (!c.ok()) return c.status();
      local.prefix.push_back(*c);
    }
    if (additional_items != nullptr) {
      auto c = ChildConj(*additional_items, at("additionalItems"), base);
      if (!c.ok()) return c.status();
      local.items = *c;
    }
  }
  return finish();
}

// ---- pass 2 ----

int Compiler::Intern(std::vector<int> members) {
  auto [it, inserted] = conj_ids_.try_emplace(members, static_cast<int>(conjs_.size()));
  if (inserted) conjs_.push_back(std::move(members));
  return it->second;
}

int Compiler::Union(int a, int b) {
  if (a == b || b == kTrue) return a;
  if (a == kTrue) return b;
  std::vector<int> members = conjs_[static_cast<size_t>(a)];
  for (int m : conjs_[static_cast<size_t>(b)]) {
    if (std::find(members.begin(), members.end(), m) == members.end()) members.push_back(m);
  }
  return Intern(std::move(members));
}

absl::StatusOr<Local> Compiler::Merge(const Local& a, const Local& b) {
  Local m = a;
  if (m.where.empty()) m.where = b.where;
  m.types &= b.types;
  if (b.has_enum) {
    if (m.has_enum) {
      SetEnum(m, b.enum_values);
    } else {
      m.has_enum = true;
      m.enum_values = b.enum_values;
      m.enum_keys = b.enum_keys;
    }
  }
  if (b.lower) TightenLower(m.lower, *b.lower);
  if (b.upper) TightenUpper(m.upper, *b.upper);
  if (b.multiple_of != 0) {
    if (m.multiple_of == 0) {
      m.multiple_of = b.multiple_of;
    } else {
      const int64_t g = std::gcd(m.multiple_of, b.multiple_of);
      const int64_t l = m.multiple_of / g;
      if (l > (int64_t{1} << 52) / b.multiple_of) return Refuse(b.where, "multipleOf: these divisors together are too large");
      m.multiple_of = l * b.multiple_of;
    }
  }
  m.min_len = std::max(m.min_len, b.min_len);
  if (b.max_len >= 0) m.max_len = m.max_len < 0 ? b.max_len : std::min(m.max_len, b.max_len);
  for (const Pattern& p : b.patterns) {
    if (std::none_of(m.patterns.begin(), m.patterns.end(), [&](const Pattern& q) { return q.source == p.source; })) {
      m.patterns.push_back(p);
    }
  }
  // Arrays: position by position; a side without a prefix item there uses its items.
  const size_t n = std::max(a.prefix.size(), b.prefix.size());
  m.prefix.clear();
  for (size_t i = 0; i < n; ++i) {
    const int ca = i < a.prefix.size() ? a.prefix[i] : a.items;
    const int cb = i < b.prefix.size() ? b.prefix[i] : b.items;
    m.prefix.push_back(Union(ca, cb));
  }
  m.items = Union(a.items, b.items);
  m.min_items = std::max(a.min_items, b.min_items);
  if (b.max_items >= 0) m.max_items = m.max_items < 0 ? b.max_items : std::min(m.max_items, b.max_items);
  // Objects: a name only one side declares falls under the other's additionalProperties.
  m.props.clear();
  for (const auto& [name, c] : a.props) {
    auto it = std::find_if(b.props.begin(), b.props.end(), [&](const auto& p) { return p.first == name; });
    m.props.emplace_back(name, Union(c, it != b.props.end() ? it->second : b.additional));
  }
  for (const auto& [name, c] : b.props) {
    if (std::none_of(a.props.begin(), a.props.end(), [&](const auto& p) { return p.first == name; })) {
      m.props.emplace_back(name, Union(a.additional, c));
    }
  }
  for (const std::string& r : b.required) {
    if (std::find(m.required.begin(), m.required.end(), r) == m.required.end()) m.required.push_back(r);
  }
  m.additional = Union(a.additional, b.additional);
  m.min_props = std::max(a.min_props, b.min_props);
  if (b.max_props >= 0) m.max_props = m.max_props < 0 ? b.max_props : std::min(m.max_props, b.max_props);
  return m;
}

absl::StatusOr<const std::vector<Local>*> Compiler::Flatten(int conj) {
  if (auto it = flat_.find(conj); it != flat_.end()) return &it->second;
  if (auto s = Tick(); !s.ok()) return s;
  const std::vector<int> members = conjs_[static_cast<size_t>(conj)];
  // The closure under allOf and $ref, in order; a cycle is a schema that refers to itself at the same level.
  std::vector<int> closure;
  absl::flat_hash_set<int> seen;
  {
    struct Frame {
      int node;
      size_t next;
    };
    absl::flat_hash_set<int> on_stack;
    for (int start : members) {
      if (seen.contains(start)) continue;
      std::vector<Frame> stack = {{start, 0}};
      seen.insert(start);
      on_stack.insert(start);
      closure.push_back(start);
      while (!stack.empty()) {
        Frame& f = stack.back();
        if (auto s = Parse(f.node); !s.ok()) return s;
        const std::vector<int>& next = nodes_[static_cast<size_t>(f.node)].conjuncts;
        if (f.next >= next.size()) {
          on_stack.erase(f.node);
          stack.pop_back();
          continue;
        }
        const int to = next[f.next++];
        if (on_stack.contains(to)) {
          return Refuse(nodes_[static_cast<size_t>(f.node)].path,
                        "refers back to itself through $ref / allOf without nesting (an infinitely recursive schema)");
        }
        if (seen.contains(to)) continue;
        seen.insert(to);
        on_stack.insert(to);
        closure.push_back(to);
        stack.push_back({to, 0});
      }
    }
  }
  const std::string here = closure.empty() ? "" : nodes_[static_cast<size_t>(closure[0])].path;
  if (flattening_.contains(conj)) {
    return Refuse(here,
                  "refers back to itself through anyOf / oneOf / $ref without nesting (an infinitely recursive "
                  "schema)");
  }
  if (flatten_depth_ > kMaxFlattenDepth) {
    return Refuse(here, absl::StrCat("anyOf / oneOf / $ref nest more than ", kMaxFlattenDepth,
                                     " deep without an object or array between them"));
  }
  Local base;
  base.where = closure.empty() ? "" : nodes_[static_cast<size_t>(closure[0])].path;
  std::vector<const Group*> groups;
  for (int id : closure) {
    auto m = Merge(base, nodes_[static_cast<size_t>(id)].local);
    if (!m.ok()) return m.status();
    base = *std::move(m);
    for (const Group& g : nodes_[static_cast<size_t>(id)].groups) groups.push_back(&g);
  }
  std::vector<Local> alts;
  if (base.types != 0 && !(base.has_enum && base.enum_values.empty())) alts.push_back(std::move(base));
  flattening_.insert(conj);
  ++flatten_depth_;
  for (const Group* g : groups) {
    std::vector<Local> next;
    OneOfCheck check{g->where, {}};
    for (const Local& alt : alts) {
      check.branches.assign(g->branches.size(), {});
      for (size_t b = 0; b < g->branches.size(); ++b) {
        auto sub = Flatten(Intern({g->branches[b]}));
        if (!sub.ok()) {
          flattening_.erase(conj);
          --flatten_depth_;
          return sub.status();
        }
        for (const Local& balt : **sub) {
          auto m = Merge(alt, balt);
          if (!m.ok()) return m.status();
          if (m->types == 0 || (m->has_enum && m->enum_values.empty())) continue;
          if (g->one_of) check.branches[b].push_back(*m);
          next.push_back(*std::move(m));
          if (next.size() > kMaxAlternatives) {
            flattening_.erase(conj);
            --flatten_depth_;
            return Refuse(g->where, absl::StrCat("anyOf / oneOf combinations exceed ", kMaxAlternatives));
          }
        }
      }
      if (g->one_of) one_ofs_.push_back(check);
    }
    alts = std::move(next);
  }
  flattening_.erase(conj);
  --flatten_depth_;
  return &flat_.emplace(conj, std::move(alts)).first->second;
}

// ---- pass 3 ----

absl::Status Compiler::Discover(int root) {
  std::deque<int> queue = {root};
  absl::flat_hash_set<int> seen = {root};
  while (!queue.empty()) {
    const int c = queue.front();
    queue.pop_front();
    discovered_.push_back(c);
    if (discovered_.size() > limits_.max_rules) {
      return absl::InvalidArgumentError(absl::StrCat("the schema needs more than ", limits_.max_rules,
                                                     " rules (CompileLimits::max_rules)"));
    }
    auto alts = Flatten(c);
    if (!alts.ok()) return alts.status();
    std::vector<int> children;
    for (const Local& alt : **alts) {
      if (alt.has_enum) continue;
      if ((alt.types & kArr) != 0) {
        children.insert(children.end(), alt.prefix.begin(), alt.prefix.end());
        children.push_back(alt.items);
      }
      if ((alt.types & kObj) != 0) {
        for (const auto& [name, pc] : alt.props) children.push_back(pc);
        children.push_back(alt.additional);
      }
    }
    for (int child : children) {
      if (seen.insert(child).second) queue.push_back(child);
    }
  }
  return absl::OkStatus();
}

int Compiler::MemberConj(const Local& alt, const std::string& name) const {
  for (const auto& [n, c] : alt.props) {
    if (n == name) return c;
  }
  return alt.additional;
}

int Compiler::ItemConj(const Local& alt, int64_t i) const {
  return i < static_cast<int64_t>(alt.prefix.size()) ? alt.prefix[static_cast<size_t>(i)] : alt.items;
}

absl::StatusOr<bool> Compiler::Validate(const json& v, int conj, int depth) {
  if (conj == kTrue) return true;
  if (depth > limits_.max_nesting * 2 + 8) return false;
  auto alts = Flatten(conj);
  if (!alts.ok()) return alts.status();
  for (const Local& alt : **alts) {
    auto ok = ValidateLocal(v, alt, depth);
    if (!ok.ok() || *ok) return ok;
  }
  return false;
}

absl::StatusOr<bool> Compiler::ValidateLocal(const json& v, const Local& alt, int depth, bool in_enum) {
  if (alt.has_enum && !in_enum && !alt.enum_keys->contains(EqualityKey(v))) return false;
  if (v.is_null()) return (alt.types & kNull) != 0;
  if (v.is_boolean()) return (alt.types & kBool) != 0;
  if (v.is_number()) {
    const Dec d = NumberDec(v);
    const bool integral = v.is_number_integer() || d.IsInteger();
    if (!((integral && (alt.types & kInt) != 0) || (v.is_number_float() && (alt.types & kFrac) != 0))) return false;
    const double as_double = v.get<double>();
    if (alt.lower) {
      const int c = Compare(d, alt.lower->exact);
      if (alt.lower->exclusive ? (c <= 0 || as_double <= alt.lower->as_double)
                               : (c < 0 || as_double < alt.lower->as_double)) {
        return false;
      }
    }
    if (alt.upper) {
      const int c = Compare(d, alt.upper->exact);
      if (alt.upper->exclusive ? (c >= 0 || as_double >= alt.upper->as_double)
                               : (c > 0 || as_double > alt.upper->as_double)) {
        return false;
      }
    }
    if (alt.multiple_of != 0) {
      if (!d.IsInteger() || d.ip.size() > 18) return false;
      if (std::stoll(d.ip) % alt.multiple_of != 0) return false;
    }
    return true;
  }
  if (v.is_string()) {
    if ((alt.types & kStr) == 0) return false;
    const std::u32string s = DecodeUtf8(v.get_ref<const std::string&>());
    const auto len = static_cast<int64_t>(s.size());
    if (len < alt.min_len || (alt.max_len >= 0 && len > alt.max_len)) return false;
    for (const Pattern& p : alt.patterns) {
      if (!Matches(p.re, s)) return false;
    }
    return true;
  }
  if (v.is_array()) {
    if ((alt.types & kArr) == 0) return false;
    const auto n = static_cast<int64_t>(v.size());
    if (n < alt.min_items || (alt.max_items >= 0 && n > alt.max_items)) return false;
    for (int64_t i = 0; i < n; ++i) {
      auto ok = Validate(v[static_cast<size_t>(i)], ItemConj(alt, i), depth + 1);
      if (!ok.ok() || !*ok) return ok;
    }
    return true;
  }
  if ((alt.types & kObj) == 0) return false;
  const auto members = static_cast<int64_t>(v.size());
  if (members < alt.min_props || (alt.max_props >= 0 && members > alt.max_props)) return false;
  for (const std::string& r : alt.required) {
    if (!v.contains(r)) return false;
  }
  for (const auto& [k, member] : v.items()) {
    auto ok = Validate(member, MemberConj(alt, k), depth + 1);
    if (!ok.ok() || !*ok) return ok;
  }
  return true;
}

absl::StatusOr<AltInfo> Compiler::AnalyzeAlt(const Local& alt) {
  AltInfo info;
  if (alt.has_enum) {
    for (const json* v : alt.enum_values) {
      if (auto s = Tick(); !s.ok()) return s;
      auto ok = ValidateLocal(*v, alt, 0, /*in_enum=*/true);
      if (!ok.ok()) return ok.status();
      if (*ok) info.enum_ok.push_back(v);
    }
    return info;
  }
  info.types = alt.types & (kNull | kBool | kArr | kObj);
  if ((alt.types & (kInt | kFrac)) != 0) {
    info.ints = IntegersWithin(alt.lower, alt.upper);
    if (alt.multiple_of != 0) {
      // A few multiples between the bounds are listed; otherwise a divisor of
      // a power of ten is a digit pattern (MultiplesRegex); others are refused.
      const int64_t k = alt.multiple_of;
      bool listed = false;
      if (info.ints.lo && info.ints.hi && info.ints.lo->ip.size() <= 15 && info.ints.hi->ip.size() <= 15) {
        const int64_t lo = std::stoll(info.ints.lo->Text());
        const int64_t hi = std::stoll(info.ints.hi->Text());
        int64_t q = lo / k;  // rounds toward zero: up for negatives
        if (lo % k != 0 && lo > 0) ++q;
        const int64_t start = q * k;
        if (start > hi || (hi - start) / k + 1 <= kMaxMultiples) {
          for (int64_t x = start; x <= hi; x += k) info.multiples.push_back(RegexLiteral(DecFromInt(x).Text()));
          listed = true;
        }
      }
      if (!listed && !info.ints.Empty()) {
        auto re = MultiplesRegex(info.ints, k);
        if (!re) {
          return Refuse(alt.where, absl::StrCat("multipleOf: ", k, " is supported only with a minimum and a maximum "
                                                "at most ", kMaxMultiples, " multiples apart (or as a divisor of a "
                                                "power of ten, 2^a 5^b)"));
        }
        if (!re->empty()) info.multiples.push_back(*std::move(re));
      }
      if (!info.multiples.empty()) info.types |= kInt;
    } else {
      if (!info.ints.Empty() && (alt.types & kInt) != 0) info.types |= kInt;
      if ((alt.types & kFrac) != 0) {
        info.fracs = FractionsWithin(alt.lower, alt.upper);
        if (!info.fracs.empty) info.types |= kFrac;
      }
    }
  }
  if ((alt.types & kObj) != 0 && (alt.min_props > 0 || alt.max_props >= 0)) {
    const int64_t cap = alt.max_props >= 0 ? alt.max_props : alt.min_props;
    const auto members = static_cast<int64_t>(alt.props.size() + alt.required.size());
    if ((members + 1) * (cap + 1) > kMaxCountStates) {
      return Refuse(alt.where, absl::StrCat("minProperties / maxProperties: counting ", cap, " members over ", members,
                                            " properties needs more than ", kMaxCountStates, " rules"));
    }
  }
  if ((alt.types & kStr) != 0) {
    if (alt.patterns.size() > 1) {
      return Refuse(alt.patterns[1].where, absl::StrCat(alt.patterns[1].source, " together with ",
                                                        alt.patterns[0].source, " (at ", alt.patterns[0].where,
                                                        ") cannot be enforced exactly"));
    }
    std::optional<Re> re;
    if (alt.patterns.empty()) {
      re = Re::Repeat(Re::Any(), alt.min_len, alt.max_len);
      if (alt.max_len >= 0 && alt.min_len > alt.max_len) re = Re::Set({});
    } else {
      re = WithLength(alt.patterns[0].re, alt.min_len, alt.max_len);
      if (!re) {
        return Refuse(alt.patterns[0].where, absl::StrCat(alt.patterns[0].source,
                                                          " with minLength / maxLength cannot be enforced exactly"));
      }
    }
    if (!IsEmptyLanguage(*re)) {
      info.types |= kStr;
      info.string_re = *std::move(re);
    }
  }
  return info;
}

absl::Status Compiler::Analyze(int conj) {
  if (infos_.contains(conj)) return absl::OkStatus();
  auto alts = Flatten(conj);
  if (!alts.ok()) return alts.status();
  std::vector<AltInfo> infos;
  for (const Local& alt : **alts) {
    auto info = AnalyzeAlt(alt);
    if (!info.ok()) return info.status();
    infos.push_back(*std::move(info));
  }
  infos_.emplace(conj, std::move(infos));
  return absl::OkStatus();
}

// The array / object part of an alternative can be met when the items and
// members it requires can (`holds` says which conjs can).
bool ArrayFeasible(const Local& alt, const std::function<bool(int)>& holds) {
  if (alt.max_items >= 0 && alt.min_items > alt.max_items) return false;
  const int64_t need = std::min<int64_t>(alt.min_items, static_cast<int64_t>(alt.prefix.size()) + 1);
  for (int64_t i = 0; i < need; ++i) {
    if (!holds(i < static_cast<int64_t>(alt.prefix.size()) ? alt.prefix[static_cast<size_t>(i)] : alt.items)) {
      return false;
    }
  }
  return true;
}

bool ObjectFeasible(const Local& alt, const std::function<bool(int)>& holds) {
  for (const std::string& r : alt.required) {
    int c = alt.additional;
    for (const auto& [n, pc] : alt.props) {
      if (n == r) c = pc;
    }
    if (!holds(c)) return false;
  }
  if (alt.max_props >= 0 && static_cast<int64_t>(alt.required.size()) > alt.max_props) return false;
  if (alt.max_props >= 0 && alt.min_props > alt.max_props) return false;
  if (alt.min_props > 0 && !holds(alt.additional)) {
    int64_t possible = 0;
    for (const auto& [n, pc] : alt.props) possible += holds(pc) ? 1 : 0;
    for (const std::string& r : alt.required) {
      possible += std::none_of(alt.props.begin(), alt.props.end(), [&](const auto& p) { return p.first == r; });
    }
    if (possible < alt.min_props) return false;
  }
  return true;
}

bool Compiler::AltNonempty(const Local& alt, const AltInfo& info) const {
  if (alt.has_enum) return !info.enum_ok.empty();
  if ((info.types & (kNull | kBool | kInt | kFrac | kStr)) != 0) return true;
  auto holds = [&](int c) {
    auto it = nonempty_.find(c);
    return c == kTrue || (it != nonempty_.end() && it->second);
  };
  return ((info.types & kArr) != 0 && ArrayFeasible(alt, holds)) ||
         ((info.types & kObj) != 0 && ObjectFeasible(alt, holds));
}

absl::StatusOr<bool> Compiler::ConjDisjoint(int a, int b, int depth) {
  if (a == kTrue || b == kTrue) return false;
  auto fa = Flatten(a);
  if (!fa.ok()) return fa.status();
  auto fb = Flatten(b);
  if (!fb.ok()) return fb.status();
  for (const Local& x : **fa) {
    for (const Local& y : **fb) {
      auto d = Disjoint(x, y, depth + 1);
      if (!d.ok() || !*d) return d;
    }
  }
  return true;
}

// True only when no value can satisfy both alternatives (false: unknown).
absl::StatusOr<bool> Compiler::Disjoint(const Local& a, const Local& b, int depth) {
  if (depth > 12) return false;
  for (const auto* p : {&a, &b}) {
    if (!p->has_enum) continue;
    const Local& other = p == &a ? b : a;
    for (const json* v : p->enum_values) {
      if (auto s = Tick(); !s.ok()) return s;
      auto in_self = ValidateLocal(*v, *p, 0, /*in_enum=*/true);
      if (!in_self.ok()) return in_self.status();
      if (!*in_self) continue;
      auto in_other = ValidateLocal(*v, other, 0);
      if (!in_other.ok()) return in_other.status();
      if (*in_other) return false;
    }
    return true;
  }
  const uint8_t common = a.types & b.types;
  if ((common & (kNull | kBool)) != 0) return false;
  const bool a_num = (a.types & (kInt | kFrac)) != 0, b_num = (b.types & (kInt | kFrac)) != 0;
  if (a_num && b_num) {
    // Disjoint when one range ends below where the other starts.
    auto below = [](const Local& x, const Local& y) {
      if (!x.upper || !y.lower) return false;
      const int c = Compare(x.upper->exact, y.lower->exact);
      return c < 0 || (c == 0 && (x.upper->exclusive || y.lower->exclusive));
    };
    if (!below(a, b) && !below(b, a)) return false;
  }
  if ((common & kStr) != 0) {
    const bool apart = (a.max_len >= 0 && a.max_len < b.min_len) || (b.max_len >= 0 && b.max_len < a.min_len);
    if (!apart) return false;
  }
  if ((common & kArr) != 0) {
    bool apart = (a.max_items >= 0 && a.max_items < b.min_items) || (b.max_items >= 0 && b.max_items < a.min_items);
    const int64_t both = std::min<int64_t>({a.min_items, b.min_items, 8});
    for (int64_t i = 0; i < both && !apart; ++i) {
      auto d = ConjDisjoint(ItemConj(a, i), ItemConj(b, i), depth);
      if (!d.ok()) return d.status();
      apart = *d;
    }
    if (!apart) return false;
  }
  if ((common & kObj) != 0) {
    bool apart = (a.max_props >= 0 && a.max_props < b.min_props) || (b.max_props >= 0 && b.max_props < a.min_props);
    for (const auto* p : {&a, &b}) {
      const Local& other = p == &a ? b : a;
      for (const std::string& name : p->required) {
        if (apart) break;
        const int mine = MemberConj(*p, name), theirs = MemberConj(other, name);
        if (theirs != kTrue && nonempty_.contains(theirs) && !nonempty_[theirs]) {
          apart = true;  // required here, impossible there
        } else if (std::find(other.required.begin(), other.required.end(), name) != other.required.end()) {
          auto d = ConjDisjoint(mine, theirs, depth);
          if (!d.ok()) return d.status();
          apart = *d;
        }
      }
    }
    if (!apart) return false;
  }
  return true;
}

absl::Status Compiler::CheckOneOfs() {
  for (const OneOfCheck& check : one_ofs_) {
    for (size_t i = 0; i < check.branches.size(); ++i) {
      for (size_t k = i + 1; k < check.branches.size(); ++k) {
        for (const Local& x : check.branches[i]) {
          for (const Local& y : check.branches[k]) {
            auto d = Disjoint(x, y, 0);
            if (!d.ok()) return d.status();
            if (!*d) {
              return Refuse(check.where, absl::StrCat("branches ", i, " and ", k,
                                                      " may both match one value; oneOf is supported only when "
                                                      "no value can match two branches (use anyOf)"));
            }
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

// ---- pass 4 ----

Symbol Compiler::Term(std::string regex, std::string name) {
  regex_bytes_ += regex.size();
  return builder_.Terminal(std::move(regex), std::move(name));
}

bool Compiler::AltNonemptyAt(const Local& alt, const AltInfo& info, int depth) {
  if (!Indented()) return AltNonempty(alt, info);
  if (alt.has_enum) return !info.enum_ok.empty();
  if ((info.types & (kNull | kBool | kInt | kFrac | kStr)) != 0) return true;
  auto holds = [&](int c) { return NonemptyAt(c, depth + 1); };
  return ((info.types & kArr) != 0 && ArrayFeasible(alt, holds)) ||
         ((info.types & kObj) != 0 && ObjectFeasible(alt, holds));
}

// Whether the conj holds a value nested `depth` deep (the indented layout
// stops at max_nesting; the compact one has no depth).
bool Compiler::NonemptyAt(int conj, int depth) {
  if (conj == kTrue) return true;
  if (!Indented()) return nonempty_[conj];
  if (depth > limits_.max_nesting || !nonempty_[conj]) return false;
  auto key = std::make_pair(conj, depth);
  if (auto it = nonempty_at_.find(key); it != nonempty_at_.end()) return it->second;
  const std::vector<Local>& alts = flat_.at(conj);
  const std::vector<AltInfo>& infos = infos_.at(conj);
  bool any = false;
  for (size_t i = 0; i < alts.size() && !any; ++i) any = AltNonemptyAt(alts[i], infos[i], depth);
  nonempty_at_[key] = any;
  return any;
}

Symbol Compiler::EmitConj(int conj, int depth) {
  if (conj == kTrue) return AnyValue(Indented() ? depth : 0);
  const auto key = std::make_pair(conj, DepthKey(depth));
  if (auto it = rules_.find(key); it != rules_.end()) return it->second;
  const std::vector<Local>& alts = flat_.at(conj);
  if (alts.size() == 1 && alts[0].Unconstrained()) return AnyValue(Indented() ? depth : 0);
  std::string name = alts.empty() || alts[0].where.empty() ? "root" : alts[0].where;
  if (Indented()) absl::StrAppend(&name, "@", depth);
  const Symbol rule = builder_.Rule(std::move(name));
  rules_[key] = rule;
  pending_.emplace_back(conj, depth, rule);
  return rule;
}

absl::Status Compiler::FillConj(int conj, int depth, Symbol rule) {
  const std::vector<Local>& alts = flat_.at(conj);
  const std::vector<AltInfo>& infos = infos_.at(conj);
  bool any = false;
  for (size_t i = 0; i < alts.size(); ++i) {
    if (!AltNonemptyAt(alts[i], infos[i], depth)) continue;
    for (auto& seq : EmitAlt(alts[i], infos[i], depth)) {
      builder_.Add(rule, std::move(seq));
      any = true;
    }
  }
  if (!any) return absl::InternalError("an empty rule was emitted");
  return absl::OkStatus();
}

std::vector<std::vector<Symbol>> Compiler::EmitAlt(const Local& alt, const AltInfo& info, int depth) {
  std::vector<std::vector<Symbol>> out;
  if (alt.has_enum) {
    std::vector<std::string> literals;
    absl::flat_hash_set<std::string> seen;
    for (const json* v : info.enum_ok) {
      std::string text = Serialize(*v, layout_, depth);
      if (seen.insert(text).second) literals.push_back(std::move(text));
    }
    if (literals.size() == 1) {
      out.push_back({builder_.Literal(literals[0])});
    } else {
      std::string regex = "(?:";
      for (size_t i = 0; i < literals.size(); ++i) absl::StrAppend(&regex, i ? "|" : "", RegexLiteral(literals[i]));
      out.push_back({Term(regex + ")", absl::StrCat(alt.where.empty() ? "root" : alt.where, ".enum"))});
    }
    return out;
  }
  if ((info.types & kNull) != 0) out.push_back({builder_.Literal("null")});
  if ((info.types & kBool) != 0) out.push_back({Term("true|false", "boolean")});
  if ((info.types & (kInt | kFrac)) != 0) {
    std::vector<std::string> parts;
    if (!info.multiples.empty()) {
      parts = info.multiples;
    } else if (!alt.lower && !alt.upper && (info.types & kFrac) != 0) {
      parts.push_back(kAnyNumberRegex);
    } else {
      if ((info.types & kInt) != 0) {
        parts.push_back(!alt.lower && !alt.upper ? std::string("(?:") + kAnyIntegerRegex + ")"
                                                 : IntRangeRegex(info.ints));
      }
      if ((info.types & kFrac) != 0) parts.push_back(FracRangeRegex(info.fracs));
    }
    out.push_back({Term(absl::StrJoin(parts, "|"), (info.types & kFrac) != 0 ? "number" : "integer")});
  }
  if ((info.types & kStr) != 0) out.push_back(EmitString(info.string_re));
  auto holds = [&](int c) { return NonemptyAt(c, depth + 1); };
  if ((info.types & kArr) != 0 && ArrayFeasible(alt, holds)) out.push_back(EmitArray(alt, depth));
  if ((info.types & kObj) != 0 && ObjectFeasible(alt, holds)) out.push_back(EmitObject(alt, depth));
  return out;
}

// `set`{min,max} (max < 0: unbounded) as rules over chunk terminals:
// exactly `min` (whole chunks and a remainder), then up to max - min more
// (fewer than q2 whole chunks and a short tail, or q2 chunks and a tail of at
// most r2: one reading per length).
Symbol Compiler::CountedUnits(const CodepointRanges& set, int64_t min, int64_t max) {
  const std::string unit = absl::StrCat("(?:", SpellJsonContent(Re::Set(set)), ")");
  auto units = [&](int64_t lo, int64_t hi) {
    const std::string count = hi < 0 ? absl::StrCat("{", lo, ",}") : lo == hi ? absl::StrCat("{", lo, "}")
                                                                              : absl::StrCat("{", lo, ",", hi, "}");
    return Term(unit + count, absl::StrCat("chars{", lo, ",", hi < 0 ? "" : absl::StrCat(hi), "}"));
  };
  const Symbol chunk = units(kChunk, kChunk);
  std::vector<Symbol> seq;
  if (min / kChunk > 0) {
    seq.push_back(builder_.Repeat(chunk, static_cast<int>(min / kChunk), static_cast<int>(min / kChunk)));
  }
  if (min % kChunk > 0) seq.push_back(units(min % kChunk, min % kChunk));
  if (max < 0) {
    seq.push_back(units(0, -1));
  } else if (const int64_t n = max - min; n > 0 && n <= kLongRun) {
    seq.push_back(units(0, n));
  } else if (n > 0) {
    const int64_t q = n / kChunk, r = n % kChunk;
    std::vector<std::vector<Symbol>> alternatives;
    alternatives.push_back({builder_.Repeat(chunk, 0, static_cast<int>(q - 1)), units(0, kChunk - 1)});
    std::vector<Symbol> full = {builder_.Repeat(chunk, static_cast<int>(q), static_cast<int>(q))};
    if (r > 0) full.push_back(units(0, r));
    alternatives.push_back(std::move(full));
    seq.push_back(builder_.Choice(std::move(alternatives), absl::StrCat("chars{0,", n, "}")));
  }
  return builder_.Choice({std::move(seq)}, absl::StrCat("chars{", min, ",", max < 0 ? "" : absl::StrCat(max), "}"));
}

// A string with value language `value`: one terminal with its quotes, unless
// a long run of one class is better counted by rules (kLongRun).
std::vector<Symbol> Compiler::EmitString(const Re& value) {
  auto long_run = [](const Re& re) {
    return re.kind == Re::Kind::kRepeat && re.kids[0].kind == Re::Kind::kSet &&
           (re.max < 0 ? re.min > kLongRun : re.max > kLongRun);
  };
  std::vector<const Re*> parts;
  if (value.kind == Re::Kind::kConcat) {
    for (const Re& kid : value.kids) parts.push_back(&kid);
  } else {
    parts.push_back(&value);
  }
  if (std::none_of(parts.begin(), parts.end(), [&](const Re* p) { return long_run(*p); })) {
    return {Term(absl::StrCat("\"", SpellJsonContent(value), "\""), "string")};
  }
  std::vector<Symbol> seq;
  std::string text = "\"";  // regex text not yet made a terminal
  for (const Re* p : parts) {
    if (!long_run(*p)) {
      text += p->kind == Re::Kind::kAlt ? absl::StrCat("(?:", SpellJsonContent(*p), ")") : SpellJsonContent(*p);
      continue;
    }
    if (!text.empty()) seq.push_back(Term(std::exchange(text, ""), "string part"));
    seq.push_back(CountedUnits(p->kids[0].set, p->min, p->max));
  }
  seq.push_back(Term(text + "\"", "string end"));
  return seq;
}

std::vector<Symbol> Compiler::EmitObject(const Local& alt, int depth) {
  std::vector<Member> members;
  std::vector<std::u32string> names;
  for (const auto& [name, c] : alt.props) {
    const bool req = std::find(alt.required.begin(), alt.required.end(), name) != alt.required.end();
    names.push_back(DecodeUtf8(name));
    if (NonemptyAt(c, depth + 1)) members.push_back({name, c, req});
  }
  for (const std::string& r : alt.required) {
    if (std::none_of(alt.props.begin(), alt.props.end(), [&](const auto& p) { return p.first == r; })) {
      names.push_back(DecodeUtf8(r));
      members.push_back({r, alt.additional, true});  // checked nonempty by AltNonemptyAt
    }
  }
  const bool extra = NonemptyAt(alt.additional, depth + 1);
  const std::string open = Indented() ? "\n" + Indent(depth + 1) : "";
  const std::string sep = Indented() ? ",\n" + Indent(depth + 1) : ",";
  const std::string colon = Indented() ? ": " : ":";
  const std::string close = Indented() ? "\n" + Indent(depth) + "}" : "}";
  const std::string where = alt.where.empty() ? "root" : alt.where;

  if (alt.min_props > 0 || alt.max_props >= 0) return EmitCountedObject(alt, members, names, extra, depth);

  // first[i] / rest[i]: the members from i on, before / after the first one written.
  const size_t n = members.size();
  std::vector<std::optional<Symbol>> first(n + 1), rest(n + 1);
  // Another member: its name (any but the declared ones) and colon are one
  // terminal, shared by the first and the later positions (its automaton is
  // the costliest of the object's).
  std::optional<Symbol> extra_value, extra_key;
  if (extra) {
    extra_value = EmitConj(alt.additional, depth + 1);
    const std::string key = SpellJsonContent(AnyStringExcept(names));
    extra_key = Term(absl::StrCat("\"", key, "\"", RegexLiteral(colon)), where + ".key");
  }
  // rest[n]: close, or more additional properties.
  rest[n] = builder_.Rule(where + ".tail");
  builder_.Add(*rest[n], {builder_.Literal(close)});
  if (extra) builder_.Add(*rest[n], {builder_.Literal(sep), *extra_key, *extra_value, *rest[n]});
  for (size_t i = n; i-- > 1;) {
    const Member& m = members[i];
    const Symbol value = EmitConj(m.conj, depth + 1);
    const Symbol key = builder_.Literal(absl::StrCat(sep, Quote(m.name), colon));
    if (m.required) {
      rest[i] = builder_.Choice({{key, value, *rest[i + 1]}}, absl::StrCat(where, ".", m.name));
    } else {
      rest[i] = builder_.Choice({{key, value, *rest[i + 1]}, {*rest[i + 1]}}, absl::StrCat(where, ".", m.name, "?"));
    }
  }
  // first[i] exists while every member before i is optional.
  size_t last_first = 0;
  while (last_first < n && !members[last_first].required) ++last_first;
  // first[k] for k in [0, last_first]; first[n] only when all are optional.
  for (size_t i = std::min(last_first, n) + 1; i-- > 0;) {
    const Symbol rule = builder_.Rule(absl::StrCat(where, ".first", i));
    if (i == n) {
      builder_.Add(rule, {builder_.Literal("}")});
      if (extra && open.empty()) builder_.Add(rule, {*extra_key, *extra_value, *rest[n]});
      if (extra && !open.empty()) builder_.Add(rule, {builder_.Literal(open), *extra_key, *extra_value, *rest[n]});
    } else {
      const Member& m = members[i];
      const Symbol value = EmitConj(m.conj, depth + 1);
      const Symbol key = builder_.Literal(absl::StrCat(open, Quote(m.name), colon));
      builder_.Add(rule, {key, value, *rest[i + 1]});
      if (!m.required) builder_.Add(rule, {*first[i + 1]});
    }
    first[i] = rule;
  }
  return {builder_.Literal("{"), *first[0]};
}

// An object with minProperties / maxProperties: the chain's states are
// (member i next, c members written), c counted up to maxProperties (or up to
// minProperties when there is no maximum: more is all the same), built from
// the end so that each state knows whether it can still finish.
std::vector<Symbol> Compiler::EmitCountedObject(const Local& alt, const std::vector<Member>& members,
                                                const std::vector<std::u32string>& names, bool extra, int depth) {
  const std::string open = Indented() ? "\n" + Indent(depth + 1) : "";
  const std::string sep = Indented() ? ",\n" + Indent(depth + 1) : ",";
  const std::string colon = Indented() ? ": " : ":";
  const std::string close = Indented() ? "\n" + Indent(depth) + "}" : "}";
  const std::string where = alt.where.empty() ? "root" : alt.where;
  const int64_t cap = alt.max_props >= 0 ? alt.max_props : alt.min_props;
  const size_t n = members.size();
  auto norm = [&](int64_t c) { return std::min(c, cap); };
  auto lead = [&](int64_t c) { return c == 0 ? open : sep; };
  std::optional<Symbol> extra_key, extra_value;
  if (extra) {
    extra_value = EmitConj(alt.additional, depth + 1);
    extra_key = Term(absl::StrCat("\"", SpellJsonContent(AnyStringExcept(names)), "\"", RegexLiteral(colon)),
                     where + ".key");
  }
  auto seq = [&](const std::string& l, std::vector<Symbol> rest) {
    std::vector<Symbol> out;
    if (!l.empty()) out.push_back(builder_.Literal(l));
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  };
  // after[c]: the tail once every declared member is decided (others, close).
  std::vector<std::optional<Symbol>> next(static_cast<size_t>(cap) + 1), here(static_cast<size_t>(cap) + 1);
  for (int64_t c = cap; c >= 0; --c) {
    std::vector<std::vector<Symbol>> alternatives;
    if (c >= alt.min_props) alternatives.push_back({builder_.Literal(c == 0 ? "}" : close)});
    const bool more = alt.max_props < 0 || c < alt.max_props;
    const auto to = static_cast<size_t>(norm(c + 1));
    if (extra && more && (to == static_cast<size_t>(c) || here[to])) {
      const Symbol rule = builder_.Rule(absl::StrCat(where, ".more", c));
      here[static_cast<size_t>(c)] = rule;  // a self-loop when c is the cap
      std::vector<Symbol> tail = {*extra_key, *extra_value, *here[to]};
      alternatives.push_back(seq(lead(c), tail));
      for (auto& a : alternatives) builder_.Add(rule, std::move(a));
      continue;
    }
    if (!alternatives.empty()) here[static_cast<size_t>(c)] = builder_.Choice(std::move(alternatives), absl::StrCat(where, ".end", c));
  }
  for (size_t i = n; i-- > 0;) {
    next.swap(here);
    std::fill(here.begin(), here.end(), std::nullopt);
    const Member& m = members[i];
    const Symbol value = EmitConj(m.conj, depth + 1);
    for (int64_t c = cap; c >= 0; --c) {
      std::vector<std::vector<Symbol>> alternatives;
      const bool more = alt.max_props < 0 || c < alt.max_props;
      if (const auto to = static_cast<size_t>(norm(c + 1)); more && next[to]) {
        alternatives.push_back({builder_.Literal(absl::StrCat(lead(c), Quote(m.name), colon)), value, *next[to]});
      }
      if (!m.required && next[static_cast<size_t>(c)]) alternatives.push_back({*next[static_cast<size_t>(c)]});
      if (!alternatives.empty()) {
        here[static_cast<size_t>(c)] = builder_.Choice(std::move(alternatives), absl::StrCat(where, ".", m.name, "#", c));
      }
    }
  }
  // ObjectFeasible guarantees the start state can finish; were it not so, a
  // rule without alternatives makes Build fail rather than admit anything.
  return {builder_.Literal("{"), here[0] ? *here[0] : builder_.Rule(where + ".impossible")};
}

std::vector<Symbol> Compiler::EmitArray(const Local& alt, int depth) {
  const std::string open = Indented() ? "\n" + Indent(depth + 1) : "";
  const std::string sep = Indented() ? ",\n" + Indent(depth + 1) : ",";
  const std::string close = Indented() ? "\n" + Indent(depth) + "]" : "]";
  const std::string where = alt.where.empty() ? "root" : alt.where;
  const auto k = static_cast<int64_t>(alt.prefix.size());
  int64_t max = alt.max_items;
  for (int64_t i = 0; i < k; ++i) {
    if (!NonemptyAt(alt.prefix[static_cast<size_t>(i)], depth + 1)) {
      max = max < 0 ? i : std::min(max, i);
      break;
    }
  }
  if (!NonemptyAt(alt.items, depth + 1)) max = max < 0 ? k : std::min(max, k);
  const int64_t min = alt.min_items;
  // after[i]: the rest once i items are written (i <= prefix length).
  const int64_t last = std::min(k, max < 0 ? k : max);
  std::vector<Symbol> after(static_cast<size_t>(last) + 1);
  {
    // after[last]: items of `items` up to max, then the close.
    const int64_t i = last;
    const Symbol rule = builder_.Rule(absl::StrCat(where, ".items", i));
    const int64_t lo = std::max<int64_t>(0, min - i);
    const int64_t hi = max < 0 ? -1 : max - i;
    const std::string close_here = i == 0 ? "]" : close;
    if (hi == 0 || i < k) {
      builder_.Add(rule, {builder_.Literal(close_here)});
    } else {
      const Symbol item = EmitConj(alt.items, depth + 1);
      if (i == 0) {
        if (lo == 0) builder_.Add(rule, {builder_.Literal("]")});
        std::vector<Symbol> seq;
        if (!open.empty()) seq.push_back(builder_.Literal(open));
        seq.push_back(item);
        const Symbol next = builder_.Choice({{builder_.Literal(sep), item}}, absl::StrCat(where, ".next"));
        seq.push_back(builder_.Repeat(next, static_cast<int>(std::max<int64_t>(0, lo - 1)),
                                      hi < 0 ? -1 : static_cast<int>(hi - 1)));
        seq.push_back(builder_.Literal(close));
        builder_.Add(rule, std::move(seq));
      } else {
        const Symbol next = builder_.Choice({{builder_.Literal(sep), item}}, absl::StrCat(where, ".next"));
        builder_.Add(rule, {builder_.Repeat(next, static_cast<int>(lo), hi < 0 ? -1 : static_cast<int>(hi)),
                            builder_.Literal(close)});
      }
    }
    after[static_cast<size_t>(i)] = rule;
  }
  for (int64_t i = last; i-- > 0;) {
    const Symbol rule = builder_.Rule(absl::StrCat(where, ".items", i));
    if (i >= min) builder_.Add(rule, {builder_.Literal(i == 0 ? "]" : close)});
    std::vector<Symbol> seq;
    const std::string& lead = i == 0 ? open : sep;
    if (!lead.empty()) seq.push_back(builder_.Literal(lead));
    seq.push_back(EmitConj(alt.prefix[static_cast<size_t>(i)], depth + 1));
    seq.push_back(after[static_cast<size_t>(i) + 1]);
    builder_.Add(rule, std::move(seq));
    after[static_cast<size_t>(i)] = rule;
  }
  return {builder_.Literal("["), after[0]};
}

// Any JSON value at `level`: containers open only while level < max_nesting.
// The indented layout counts levels from the document's top (its whitespace
// depends on them); the compact one from where the unconstrained value starts.
Symbol Compiler::AnyValue(int level) {
  if (auto it = any_values_.find(level); it != any_values_.end()) return it->second;
  const std::string at = Indented() ? absl::StrCat("@", level) : absl::StrCat("#", level);
  const Symbol rule = builder_.Rule("any" + at);
  any_values_[level] = rule;
  builder_.Add(rule, {builder_.Literal("null")});
  builder_.Add(rule, {Term("true|false", "boolean")});
  builder_.Add(rule, {Term(kAnyNumberRegex, "number")});
  builder_.Add(rule, {Term(absl::StrCat("\"", SpellJsonContent(Re::Repeat(Re::Any(), 0, -1)), "\""), "string")});
  builder_.Add(rule, {AnyObject(level)});
  const Symbol array = builder_.Rule("any_array" + at);
  builder_.Add(array, {builder_.Literal("[]")});
  builder_.Add(rule, {array});
  pending_.emplace_back(-1, level, array);  // Drain adds the nonempty form
  return rule;
}

Symbol Compiler::AnyObject(int level) {
  if (auto it = any_objects_.find(level); it != any_objects_.end()) return it->second;
  const Symbol rule = builder_.Rule(absl::StrCat("any_object", Indented() ? "@" : "#", level));
  any_objects_[level] = rule;
  builder_.Add(rule, {builder_.Literal("{}")});
  pending_.emplace_back(-2, level, rule);  // Drain adds the nonempty form
  return rule;
}

absl::Status Compiler::Drain() {
  while (!pending_.empty()) {
    if (auto s = Tick(); !s.ok()) return s;
    if (builder_.size() > limits_.max_rules) {
      return absl::InvalidArgumentError(absl::StrCat("the schema needs more than ", limits_.max_rules,
                                                     " rules and terminals (CompileLimits::max_rules)"));
    }
    if (regex_bytes_ > limits_.max_memory_bytes / 8) {
      return absl::InvalidArgumentError(absl::StrCat("the schema's terminals exceed ", limits_.max_memory_bytes / 8,
                                                     " bytes of regex (CompileLimits::max_memory_bytes / 8)"));
    }
    auto [conj, depth, rule] = pending_.front();
    pending_.pop_front();
    if (conj >= 0) {
      if (auto s = FillConj(conj, depth, rule); !s.ok()) return s;
      continue;
    }
    // Any array (-1) / any object (-2): members one level deeper, within the bound.
    const int level = depth + 1;
    if (level > limits_.max_nesting) continue;
    const Symbol value = AnyValue(level);
    const std::string open = Indented() ? "\n" + Indent(level) : "";
    const std::string sep = Indented() ? ",\n" + Indent(level) : ",";
    const std::string close_char = conj == -1 ? "]" : "}";
    const std::string close = Indented() ? "\n" + Indent(depth) + close_char : close_char;
    if (conj == -1) {
      const Symbol next = builder_.Choice({{builder_.Literal(sep), value}}, "any_array.next");
      std::vector<Symbol> seq = {builder_.Literal("[")};
      if (!open.empty()) seq.push_back(builder_.Literal(open));
      seq.push_back(value);
      seq.push_back(builder_.Star(next));
      seq.push_back(builder_.Literal(close));
      builder_.Add(rule, std::move(seq));
    } else {
      const std::string colon = Indented() ? ": " : ":";
      const std::string key = absl::StrCat("\"", SpellJsonContent(Re::Repeat(Re::Any(), 0, -1)), "\"");
      const Symbol first_key = Term(absl::StrCat("\\{", RegexLiteral(open), key, RegexLiteral(colon)), "any_object.key");
      const Symbol next_key = Term(absl::StrCat(RegexLiteral(sep), key, RegexLiteral(colon)), "any_object.key");
      const Symbol next = builder_.Choice({{next_key, value}}, "any_object.next");
      builder_.Add(rule, {first_key, value, builder_.Star(next), builder_.Literal(close)});
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Grammar> Compiler::Run() {
  if (root_.is_object()) {
    if (auto it = root_.find("$schema"); it != root_.end() && it->is_string()) {
      const std::string& s = it->get_ref<const std::string&>();
      if (absl::StrContains(s, "draft-03")) return Refuse("$schema", "draft 3 schemas are not supported");
      legacy_refs_ = absl::StrContains(s, "draft-04") || absl::StrContains(s, "draft-06") ||
                     absl::StrContains(s, "draft-07");
    }
  }
  if (auto s = IndexIds(); !s.ok()) return s;
  auto root = ChildConj(root_, "", "");
  if (!root.ok()) return root.status();
  if (auto s = Discover(*root); !s.ok()) return s;
  for (int c : discovered_) {
    if (auto s = Analyze(c); !s.ok()) return s;
  }
  // Least fixpoint: a conj holds a value when one of its alternatives does.
  for (int c : discovered_) nonempty_[c] = false;
  nonempty_[kTrue] = true;
  for (bool changed = true; changed;) {
    changed = false;
    if (auto s = Tick(); !s.ok()) return s;
    for (int c : discovered_) {
      if (nonempty_[c]) continue;
      const std::vector<Local>& alts = flat_.at(c);
      const std::vector<AltInfo>& infos = infos_.at(c);
      for (size_t i = 0; i < alts.size(); ++i) {
        if (AltNonempty(alts[i], infos[i])) {
          nonempty_[c] = true;
          changed = true;
          break;
        }
      }
    }
  }
  if (!nonempty_[*root]) {
    return absl::InvalidArgumentError(
        "the schema is unsatisfiable: no JSON value is valid against it (conflicting types, bounds or enums, or a "
        "$ref cycle with no way out)");
  }
  if (auto s = CheckOneOfs(); !s.ok()) return s;
  if (!NonemptyAt(*root, 0)) {
    return absl::InvalidArgumentError(absl::StrCat("every valid value nests deeper than ", limits_.max_nesting,
                                                   " levels (CompileLimits::max_nesting)"));
  }
  const Symbol start = EmitConj(*root, 0);
  if (auto s = Drain(); !s.ok()) return s;
  // The start must be a rule.
  Symbol top = start;
  if (start.kind != Symbol::Kind::kRule) top = builder_.Choice({{start}}, "root");
  return std::move(builder_).Build(top, limits_);
}

absl::StatusOr<Grammar> Compiler::RunAnyObject() {
  const Symbol start = AnyObject(0);
  if (auto s = Drain(); !s.ok()) return s;
  return std::move(builder_).Build(start, limits_);
}

}  // namespace

absl::StatusOr<Grammar> JsonSchemaGrammar(absl::string_view schema_json, JsonLayout layout,
                                          const CompileLimits& limits) {
  if (schema_json.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the schema is ", schema_json.size(), " bytes, more than the limit of ",
                                                   limits.max_spec_bytes, " (CompileLimits::max_spec_bytes)"));
  }
  JsonLimits json_limits;
  json_limits.max_depth = 2 * limits.max_nesting + 2;  // a schema level is an object and its keyword's map or list
  auto schema = ParseJson<json>(schema_json, json_limits);
  if (!schema.ok()) return absl::InvalidArgumentError(absl::StrCat("the schema ", schema.status().message()));
  Compiler compiler(*schema, layout, limits);
  return compiler.Run();
}

absl::StatusOr<Grammar> JsonObjectGrammar(JsonLayout layout, const CompileLimits& limits) {
  const json empty = json::object();
  Compiler compiler(empty, layout, limits);
  return compiler.RunAnyObject();
}

}  // namespace tpserve::grammar
