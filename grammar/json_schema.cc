// JSON Schema to the grammar IR (json_schema.h). Four passes, the first two
// and the driver here, pass 3 in json_schema_analysis.cc, pass 4 in
// json_schema_emit.cc (their types: json_schema_compiler.h):
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
#include <memory>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grammar/json_schema_compiler.h"
#include "json/strict_json.h"

namespace tpserve::grammar {
namespace json_internal {
namespace {

// ---- JSON values ----

// The schema's DOM, members in their order. nlohmann's ordered_json inserts
// each member after a linear search for its key (an object of 100k members
// takes seconds, uninterruptibly); CheckJson has already refused repeated
// keys, so this SAX handler appends members as they come.
class OrderedBuilder final : public nlohmann::json_sax<json> {
 public:
  explicit OrderedBuilder(json& root) : root_(root) {}
  bool null() override { return Insert(nullptr) != nullptr; }
  bool boolean(bool v) override { return Insert(v) != nullptr; }
  bool number_integer(number_integer_t v) override { return Insert(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) override { return Insert(v) != nullptr; }
  bool number_float(number_float_t v, const string_t&) override { return Insert(v) != nullptr; }
  bool string(string_t& v) override { return Insert(std::move(v)) != nullptr; }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return Open(json::object()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  json* Insert(json v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *open_.back();
    if (top.is_array()) {
      auto& items = top.get_ref<json::array_t&>();
      items.push_back(std::move(v));
      return &items.back();
    }
    auto& members = static_cast<json::object_t::Container&>(top.get_ref<json::object_t&>());
    members.emplace_back(std::move(key_), std::move(v));
    return &members.back().second;
  }
  bool Open(json container) {
    json* j = Insert(std::move(container));
    open_.push_back(j);  // only the innermost open container grows, so this stays valid
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  json& root_;
  std::vector<json*> open_;
  std::string key_;
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

// The types a "type" value names.
absl::StatusOr<uint8_t> TypeMask(const json& value, const std::string& where) {
  std::vector<const json*> names;
  if (value.is_string()) {
    names.push_back(&value);
  } else if (value.is_array()) {
    for (const json& v : value) names.push_back(&v);
  } else {
    return Refuse(where, "must be a string or an array of strings");
  }
  static const auto* kTypes = new std::vector<std::pair<std::string, uint8_t>>{
      {"null", kNull}, {"boolean", kBool}, {"integer", kInt}, {"number", kInt | kFrac},
      {"string", kStr}, {"array", kArr},   {"object", kObj}};
  uint8_t mask = 0;
  for (const json* name : names) {
    if (!name->is_string()) return Refuse(where, "must be a string or an array of strings");
    const std::string& t = name->get_ref<const std::string&>();
    auto it = std::find_if(kTypes->begin(), kTypes->end(), [&](const auto& k) { return k.first == t; });
    if (it == kTypes->end()) return Refuse(where, absl::StrCat("unknown type \"", t, "\""));
    mask |= it->second;
  }
  return mask;
}

// The types `not` excludes: all for true or {} (annotations aside), none for
// false, the named ones for a schema of "type" alone. Anything else is
// refused; so is "integer" without "number" (a number written with a
// fraction, 1.0, may be an integer, so the rest could not be told apart).
absl::StatusOr<uint8_t> NotTypes(const json& value, const std::string& where) {
  if (value.is_boolean()) return value.get<bool>() ? uint8_t{kAllTypes} : uint8_t{0};
  if (!value.is_object()) return Refuse(where, "must be a schema (an object or a boolean)");
  static const auto* kAnnotations = new absl::flat_hash_set<std::string>{
      "title", "description", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly"};
  uint8_t excluded = kAllTypes;
  for (const auto& [key, v] : value.items()) {
    if (kAnnotations->contains(key)) continue;
    if (key != "type") {
      return Refuse(where, absl::StrCat("not supported with \"", key,
                                        "\" (only not of {}, true, false or a \"type\" alone)"));
    }
    auto mask = TypeMask(v, Join(where, "type"));
    if (!mask.ok()) return mask.status();
    excluded = *mask;
  }
  if ((excluded & kInt) != 0 && (excluded & kFrac) == 0) {
    return Refuse(where, "not of \"integer\" without \"number\" is not supported (1.0 is an integer too)");
  }
  return excluded;
}

// Keywords that constrain instances and are not supported: refused by name.
const absl::flat_hash_set<absl::string_view>& RefusedKeywords() {
  static const auto* set = new absl::flat_hash_set<absl::string_view>{
      "patternProperties",     "propertyNames",     "dependencies",  "dependentRequired",
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

}  // namespace

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

absl::Status Compiler::Tick() {
  if ((++ticks_ & 15) == 0 && absl::Now() > deadline_) {
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

struct Compiler::Keywords {
  const json& j;          // the schema object
  const std::string& path;
  std::string base;       // the base URI its $ref resolve against
  Local local;
  std::vector<int> conjuncts;
  std::vector<Group> groups;
  // Keywords read together once all are seen.
  const json* items_array = nullptr;  // `items` as an array (before 2020-12)
  const json* additional_items = nullptr;
  bool exclusive_min_flag = false, exclusive_max_flag = false;  // draft 4's boolean forms
  const json* minimum = nullptr;
  const json* maximum = nullptr;

  std::string At(absl::string_view key) const { return Join(path, key); }
};

absl::Status Compiler::Parse(int id) {
  if (nodes_[static_cast<size_t>(id)].parsed) return absl::OkStatus();
  if (auto s = Tick(); !s.ok()) return s;
  // Copies: NodeAt below may grow nodes_.
  const json& j = *nodes_[static_cast<size_t>(id)].j;
  const std::string path = nodes_[static_cast<size_t>(id)].path;
  Keywords k{.j = j, .path = path, .base = nodes_[static_cast<size_t>(id)].base};
  k.local.where = path;
  auto finish = [&]() {
    Node& node = nodes_[static_cast<size_t>(id)];
    node.local = std::move(k.local);
    node.conjuncts = std::move(k.conjuncts);
    node.groups = std::move(k.groups);
    node.parsed = true;
    return absl::OkStatus();
  };
  if (j.is_boolean()) {
    if (!j.get<bool>()) k.local.types = 0;
    return finish();
  }
  if (!j.is_object()) return Refuse(path, "a schema must be an object or a boolean");
  for (const char* key : {"$id", "id"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string() && !it->get<std::string>().empty() && it->get<std::string>()[0] != '#') {
      if (absl::string_view(key) == "id" && j.contains("$id")) continue;
      k.base = ResolveUri(k.base, it->get<std::string>());
    }
  }
  if (auto it = j.find("$ref"); it != j.end() && it->is_string()) {
    auto target = Resolve(k.base, it->get<std::string>(), k.At("$ref"));
    if (!target.ok()) return target.status();
    k.conjuncts.push_back(*target);
    if (legacy_refs_) return finish();  // draft 4 to 7: siblings of $ref are ignored
  }
  for (const auto& [key, value] : j.items()) {
    if (auto s = ParseKeyword(key, value, k); !s.ok()) return s;
  }
  if (auto s = FinishKeywords(k); !s.ok()) return s;
  return finish();
}

absl::Status Compiler::ParseKeyword(const std::string& key, const json& value, Keywords& k) {
  const std::string where = k.At(key);
  if (RefusedKeywords().contains(key)) return Refuse(where, "not supported");
  if (key == "if" && (k.j.contains("then") || k.j.contains("else"))) return Refuse(where, "not supported");
  if (key == "type") {
    auto mask = TypeMask(value, where);
    if (!mask.ok()) return mask.status();
    k.local.types &= *mask;
  } else if (key == "not") {
    auto excluded = NotTypes(value, where);
    if (!excluded.ok()) return excluded.status();
    k.local.types &= static_cast<uint8_t>(~*excluded);
  } else if (key == "enum" || key == "const") {
    std::vector<const json*> values;
    if (key == "const") {
      values.push_back(&value);
    } else if (value.is_array()) {
      for (const json& v : value) values.push_back(&v);
    } else {
      return Refuse(where, "must be an array");
    }
    SetEnum(k.local, values);
  } else if (key == "multipleOf" || key == "minimum" || key == "maximum" || key == "exclusiveMinimum" ||
             key == "exclusiveMaximum") {
    return ParseNumberKeyword(key, value, k);
  } else if (key == "minLength" || key == "maxLength" || key == "pattern" || key == "format") {
    return ParseStringKeyword(key, value, k);
  } else if (key == "items" || key == "prefixItems" || key == "additionalItems" || key == "minItems" ||
             key == "maxItems" || key == "uniqueItems") {
    return ParseArrayKeyword(key, value, k);
  } else if (key == "properties" || key == "required" || key == "additionalProperties" || key == "minProperties" ||
             key == "maxProperties") {
    return ParseObjectKeyword(key, value, k);
  } else if (key == "allOf" || key == "anyOf" || key == "oneOf") {
    return ParseCombinator(key, value, k);
  }
  // Anything else is an annotation or a keyword JSON Schema ignores.
  return absl::OkStatus();
}

absl::Status Compiler::ParseNumberKeyword(const std::string& key, const json& value, Keywords& k) {
  const std::string where = k.At(key);
  if (key == "multipleOf") {
    if (!value.is_number() || value.get<double>() <= 0) return Refuse(where, "must be a positive number");
    const Dec d = NumberDec(value);
    if (!d.IsInteger()) return Refuse(where, "not supported for a divisor that is not an integer");
    if (d.ip.size() > 15) return Refuse(where, "not supported for a divisor this large");
    const int64_t n = std::stoll(d.ip);
    if (n == 1) {
      k.local.types &= static_cast<uint8_t>(~kFrac);
    } else {
      k.local.multiple_of = n;
    }
  } else if (key == "minimum" || key == "maximum") {
    if (!value.is_number()) return Refuse(where, "must be a number");
    (key == "minimum" ? k.minimum : k.maximum) = &value;
  } else {  // exclusiveMinimum, exclusiveMaximum
    const bool lower = key == "exclusiveMinimum";
    if (value.is_boolean()) {
      (lower ? k.exclusive_min_flag : k.exclusive_max_flag) = value.get<bool>();
    } else if (!value.is_number()) {
      return Refuse(where, "must be a number");
    } else if (lower) {
      TightenLower(k.local.lower, BoundOf(value, true));
    } else {
      TightenUpper(k.local.upper, BoundOf(value, true));
    }
  }
  return absl::OkStatus();
}

absl::Status Compiler::ParseStringKeyword(const std::string& key, const json& value, Keywords& k) {
  const std::string where = k.At(key);
  Local& local = k.local;
  if (key == "minLength" || key == "maxLength") {
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
    return absl::OkStatus();
  }
  if (!value.is_string()) return Refuse(where, "must be a string");
  const std::string& text = value.get_ref<const std::string&>();
  if (key == "pattern") {
    auto re = ParseEcmaPattern(text);
    if (!re.ok()) return Refuse(where, re.status().message());
    local.patterns.push_back({*std::move(re), absl::StrCat("pattern ", Quote(text)), where});
  } else if (auto re = FormatLanguage(text)) {  // format
    local.patterns.push_back({*std::move(re), absl::StrCat("format ", Quote(text)), where});
  } else if (text == "int32" || text == "int64") {
    // ajv-formats: a number that is an integer within the range (strings are unaffected).
    local.types &= static_cast<uint8_t>(~kFrac);
    if (text == "int32") {
      TightenLower(local.lower, BoundFromInt(INT32_MIN, false));
      TightenUpper(local.upper, BoundFromInt(INT32_MAX, false));
    } else {
      TightenLower(local.lower, BoundFromDouble(-9007199254740991.0, false));
      TightenUpper(local.upper, BoundFromDouble(9007199254740991.0, false));
    }
  } else if (RefusedFormats().contains(text)) {
    return Refuse(where, absl::StrCat("format \"", text, "\" is not supported"));
  }
  // Any other format is an annotation (draft 2020-12): it constrains nothing.
  return absl::OkStatus();
}

absl::Status Compiler::ParseArrayKeyword(const std::string& key, const json& value, Keywords& k) {
  const std::string where = k.At(key);
  Local& local = k.local;
  if (key == "uniqueItems") {
    if (value.is_boolean() && value.get<bool>()) {
      auto max_items = k.j.find("maxItems");
      const bool trivial = max_items != k.j.end() && max_items->is_number() && max_items->get<double>() <= 1;
      if (!trivial) return Refuse(where, "not supported");
    }
  } else if (key == "items") {
    if (value.is_array()) {
      k.items_array = &value;
    } else {
      auto c = ChildConj(value, where, k.base);
      if (!c.ok()) return c.status();
      local.items = *c;
    }
  } else if (key == "prefixItems") {
    if (!value.is_array()) return Refuse(where, "must be an array");
    for (size_t i = 0; i < value.size(); ++i) {
      auto c = ChildConj(value[i], Join(where, std::to_string(i)), k.base);
      if (!c.ok()) return c.status();
      local.prefix.push_back(*c);
    }
  } else if (key == "additionalItems") {
    k.additional_items = &value;
  } else {  // minItems, maxItems
    auto n = Count(value, where);
    if (!n.ok()) return n.status();
    if (key == "minItems") {
      if (*n > INT32_MAX) return Refuse(where, absl::StrCat(*n, " is more than ", INT32_MAX));
      local.min_items = std::max(local.min_items, *n);
    } else {
      const int64_t m = std::min<int64_t>(*n, INT32_MAX);
      local.max_items = local.max_items < 0 ? m : std::min(local.max_items, m);
    }
  }
  return absl::OkStatus();
}

absl::Status Compiler::ParseObjectKeyword(const std::string& key, const json& value, Keywords& k) {
  const std::string where = k.At(key);
  Local& local = k.local;
  if (key == "minProperties" || key == "maxProperties") {
    auto n = Count(value, where);
    if (!n.ok()) return n.status();
    if (key == "minProperties") {
      local.min_props = std::max(local.min_props, *n);
    } else {
      local.max_props = local.max_props < 0 ? *n : std::min(local.max_props, *n);
    }
  } else if (key == "properties") {
    if (!value.is_object()) return Refuse(where, "must be an object");
    for (const auto& [name, sub] : value.items()) {
      if (auto s = Tick(); !s.ok()) return s;
      auto c = ChildConj(sub, Join(where, name), k.base);
      if (!c.ok()) return c.status();
      local.props.emplace_back(name, *c);
    }
  } else if (key == "required") {
    if (value.is_boolean()) return absl::OkStatus();  // draft 3's boolean form: refused by $schema
    if (!value.is_array()) return Refuse(where, "must be an array of strings");
    for (const json& name : value) {
      if (!name.is_string()) return Refuse(where, "must be an array of strings");
      const std::string& n = name.get_ref<const std::string&>();
      if (std::find(local.required.begin(), local.required.end(), n) == local.required.end()) {
        local.required.push_back(n);
      }
    }
  } else {  // additionalProperties
    auto c = ChildConj(value, where, k.base);
    if (!c.ok()) return c.status();
    local.additional = *c;
  }
  return absl::OkStatus();
}

// allOf joins the node's conjuncts; anyOf and oneOf are groups of branches.
absl::Status Compiler::ParseCombinator(const std::string& key, const json& value, Keywords& k) {
  const std::string where = k.At(key);
  if (!value.is_array() || value.empty()) return Refuse(where, "must be a nonempty array");
  Group group{key == "oneOf", {}, where};
  for (size_t i = 0; i < value.size(); ++i) {
    const json& sub = value[i];
    if (!sub.is_object() && !sub.is_boolean()) {
      return Refuse(Join(where, std::to_string(i)), "a schema must be an object or a boolean");
    }
    group.branches.push_back(NodeAt(&sub, Join(where, std::to_string(i)), k.base));
  }
  if (key == "allOf") {
    k.conjuncts.insert(k.conjuncts.end(), group.branches.begin(), group.branches.end());
  } else {
    k.groups.push_back(std::move(group));
  }
  return absl::OkStatus();
}

// The keywords read together: bounds with draft 4's exclusive flags, and
// `items` as an array with additionalItems.
absl::Status Compiler::FinishKeywords(Keywords& k) {
  if (k.minimum != nullptr) TightenLower(k.local.lower, BoundOf(*k.minimum, k.exclusive_min_flag));
  if (k.maximum != nullptr) TightenUpper(k.local.upper, BoundOf(*k.maximum, k.exclusive_max_flag));
  if (k.items_array == nullptr) return absl::OkStatus();
  for (size_t i = 0; i < k.items_array->size(); ++i) {
    auto c = ChildConj((*k.items_array)[i], Join(k.At("items"), std::to_string(i)), k.base);
    if (!c.ok()) return c.status();
    k.local.prefix.push_back(*c);
  }
  if (k.additional_items != nullptr) {
    auto c = ChildConj(*k.additional_items, k.At("additionalItems"), k.base);
    if (!c.ok()) return c.status();
    k.local.items = *c;
  }
  return absl::OkStatus();
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
  // (No structured bindings here: clang 14, the fuzz build's, cannot capture them in a lambda.)
  for (const auto& prop : a.props) {
    const std::string& name = prop.first;
    auto it = std::find_if(b.props.begin(), b.props.end(), [&](const auto& p) { return p.first == name; });
    m.props.emplace_back(name, Union(prop.second, it != b.props.end() ? it->second : b.additional));
  }
  for (const auto& prop : b.props) {
    const std::string& name = prop.first;
    if (std::none_of(a.props.begin(), a.props.end(), [&](const auto& p) { return p.first == name; })) {
      m.props.emplace_back(name, Union(a.additional, prop.second));
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

// The nodes `members` reach through allOf and $ref, in order; a cycle is a
// schema that refers to itself at the same level.
absl::StatusOr<std::vector<int>> Compiler::Closure(const std::vector<int>& members) {
  struct Frame {
    int node;
    size_t next;
  };
  std::vector<int> closure;
  absl::flat_hash_set<int> seen, on_stack;
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
  return closure;
}

absl::StatusOr<const std::vector<Local>*> Compiler::Flatten(int conj) {
  if (auto it = flat_.find(conj); it != flat_.end()) return &it->second;
  if (auto s = Tick(); !s.ok()) return s;
  auto closure = Closure(conjs_[static_cast<size_t>(conj)]);
  if (!closure.ok()) return closure.status();
  const std::string here = closure->empty() ? "" : nodes_[static_cast<size_t>(closure->front())].path;
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
  base.where = here;
  std::vector<const Group*> groups;
  for (int id : *closure) {
    auto m = Merge(base, nodes_[static_cast<size_t>(id)].local);
    if (!m.ok()) return m.status();
    base = *std::move(m);
    for (const Group& g : nodes_[static_cast<size_t>(id)].groups) groups.push_back(&g);
  }
  std::vector<Local> alts;
  if (base.types != 0 && !(base.has_enum && base.enum_values.empty())) alts.push_back(std::move(base));
  // While its groups expand, `conj` is being flattened: meeting it again is a cycle.
  flattening_.insert(conj);
  ++flatten_depth_;
  absl::Status status;
  for (const Group* g : groups) {
    auto next = ExpandGroup(*g, alts);
    if (!next.ok()) {
      status = next.status();
      break;
    }
    alts = *std::move(next);
  }
  flattening_.erase(conj);
  --flatten_depth_;
  if (!status.ok()) return status;
  return &flat_.emplace(conj, std::move(alts)).first->second;
}

// Each alternative of `alts` merged with each of the group's branches (those
// that can hold a value); oneOf's branches are kept for its check.
absl::StatusOr<std::vector<Local>> Compiler::ExpandGroup(const Group& g, const std::vector<Local>& alts) {
  std::vector<Local> next;
  OneOfCheck check{g.where, {}};
  for (const Local& alt : alts) {
    check.branches.assign(g.branches.size(), {});
    for (size_t b = 0; b < g.branches.size(); ++b) {
      auto sub = Flatten(Intern({g.branches[b]}));
      if (!sub.ok()) return sub.status();
      for (const Local& balt : **sub) {
        auto m = Merge(alt, balt);
        if (!m.ok()) return m.status();
        if (m->types == 0 || (m->has_enum && m->enum_values.empty())) continue;
        if (g.one_of) check.branches[b].push_back(*m);
        next.push_back(*std::move(m));
        if (next.size() > kMaxAlternatives) {
          return Refuse(g.where, absl::StrCat("anyOf / oneOf combinations exceed ", kMaxAlternatives));
        }
      }
    }
    if (g.one_of) one_ofs_.push_back(check);
  }
  return next;
}

absl::StatusOr<Symbol> Compiler::Run() {
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
  if (!NonemptyAt(*root, base_depth_)) {
    return absl::InvalidArgumentError(absl::StrCat("every valid value nests deeper than ", limits_.max_nesting,
                                                   " levels (CompileLimits::max_nesting)"));
  }
  const Symbol start = EmitConj(*root, base_depth_);
  if (auto s = Drain(); !s.ok()) return s;
  return start;  // a rule: EmitConj's own, or AnyValue's
}

absl::StatusOr<Symbol> Compiler::RunAnyObject() {
  const Symbol start = AnyObject(Indented() ? base_depth_ : 0);
  if (auto s = Drain(); !s.ok()) return s;
  return start;
}

}  // namespace json_internal


absl::StatusOr<Symbol> AddJsonSchema(GrammarBuilder& builder, absl::string_view schema_json, JsonLayout layout,
                                     int depth, const CompileLimits& limits) {
  if (schema_json.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the schema is ", schema_json.size(), " bytes, more than the limit of ",
                                                   limits.max_spec_bytes, " (CompileLimits::max_spec_bytes)"));
  }
  const absl::Time deadline = absl::Now() + limits.max_time;  // the text's parsing counts too
  JsonLimits json_limits;
  json_limits.max_depth = 2 * limits.max_nesting + 2;  // a schema level is an object and its keyword's map or list
  if (absl::Status s = CheckJson(schema_json, json_limits); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the schema ", s.message()));
  }
  json_internal::json schema;
  json_internal::OrderedBuilder dom(schema);
  if (!json_internal::json::sax_parse(schema_json.begin(), schema_json.end(), &dom)) {
    return absl::InvalidArgumentError("the schema is not valid JSON");
  }
  json_internal::Compiler compiler(schema, layout, limits, deadline, builder, std::max(depth, 0));
  return compiler.Run();
}

absl::StatusOr<Symbol> AddJsonObject(GrammarBuilder& builder, JsonLayout layout, int depth,
                                     const CompileLimits& limits) {
  const json_internal::json empty = json_internal::json::object();
  json_internal::Compiler compiler(empty, layout, limits, absl::Now() + limits.max_time, builder, std::max(depth, 0));
  return compiler.RunAnyObject();
}

absl::StatusOr<Grammar> JsonSchemaGrammar(absl::string_view schema_json, JsonLayout layout,
                                          const CompileLimits& limits) {
  GrammarBuilder builder;
  auto start = AddJsonSchema(builder, schema_json, layout, 0, limits);
  if (!start.ok()) return start.status();
  return std::move(builder).Build(*start, limits);
}

absl::StatusOr<Grammar> JsonObjectGrammar(JsonLayout layout, const CompileLimits& limits) {
  GrammarBuilder builder;
  auto start = AddJsonObject(builder, layout, 0, limits);
  if (!start.ok()) return start.status();
  return std::move(builder).Build(*start, limits);
}

}  // namespace tpserve::grammar
