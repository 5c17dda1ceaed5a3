// The values a template computes with, modelled on the Python objects Jinja2
// sees when transformers renders a chat template: None, bool, int, float, str,
// list, dict (insertion-ordered), callables (macros, methods, globals) and
// Jinja's Undefined. Lists and dicts are shared and immutable once built, as in
// ImmutableSandboxedEnvironment; only namespace() objects take assignments.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jinja/text.h"
#include "nlohmann/json.hpp"

namespace tpserve::jinja {

class Value;
using List = std::vector<Value>;

// An insertion-ordered str -> Value map (Python dict with str keys).
class Dict {
 public:
  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value v);
  // Drops every entry (the interpreter empties namespaces at the end of a render).
  void Clear();
  const std::vector<std::pair<std::string, Value>>& items() const;
  size_t size() const;  // defined below Value: std::pair needs the complete type

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  // The named argument `name`; nullptr when absent.
  const Value* Named(std::string_view name) const;
};

// A callable: a global (range, namespace, raise_exception, ...), a bound method
// ("a".upper) or a macro. Errors are thrown as RenderError (jinja/error.h).
struct Function {
  std::string name;  // for messages: "range", "str.split", "macro foo"
  std::function<Value(CallArgs&)> call;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // Undefined
  static Value Undefined(std::string hint = {});
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(Text s);
  // Lists, dicts and bound methods nest at most kMaxNesting deep (a namespace and
  // a scalar count 0): printing, comparing and freeing a value recurse through
  // it, so a template that nests deeper (a loop of `set ns.a = [ns.a]`) gets
  // RenderError instead of a stack overflow.
  static constexpr int kMaxNesting = 512;
  static Value MakeList(List items, bool is_tuple = false);  // a tuple prints as (a, b)
  static Value MakeDict(Dict d, bool is_namespace = false);
  // `bound_to`: the value a bound method keeps (its `self`), nullptr for none.
  static Value MakeFunction(Function f, const Value* bound_to = nullptr);
  // JSON -> Value: strings are data (untrusted) unless `trusted`; object key order kept.
  // Nesting deeper than kMaxJsonDepth throws RenderError.
  static Value FromJson(const nlohmann::ordered_json& j, bool trusted = false, int depth = 0);
  static constexpr int kMaxJsonDepth = 128;

  Kind kind() const { return kind_; }
  // How deep lists, dicts and bound methods nest in this value; see kMaxNesting.
  int nesting() const { return nesting_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && is_namespace_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(kind_ == Kind::kBool ? b_ : i_); }
  const Text& text() const { return *text_; }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  Dict& mutable_namespace() const { return *dict_; }  // requires is_namespace()
  const Function& function() const { return *fn_; }
  const std::string& undefined_hint() const { return hint_; }

  // Python truthiness (Undefined is false).
  bool Truthy() const;
  // str(value) as Jinja prints it ("None", "True", "1.5", "['a', 1]"); strings keep their origin.
  Text ToText() const;
  // Python repr(): strings quoted, used inside printed lists and dicts.
  std::string Repr() const;
  // Python ==, with 1 == 1.0 == True and deep list/dict comparison.
  bool Equals(const Value& other) const;
  // Python type name for messages: "str", "list", "undefined", ...
  std::string_view TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool is_namespace_ = false;
  bool is_tuple_ = false;
  int nesting_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::string hint_;  // Undefined: what was looked up ("message.content")
  std::shared_ptr<const Text> text_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

inline const std::vector<std::pair<std::string, Value>>& Dict::items() const { return items_; }
inline size_t Dict::size() const { return items_.size(); }

// Python's repr(float): shortest round-trip digits, "1e+20", "1e-05", "1.0".
std::string FloatRepr(double f);

// json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...)
// as transformers' tojson filter calls it. indent < 0 means None. Errors
// (Undefined, a callable) throw RenderError.
std::string ToJson(const Value& v, int indent, bool sort_keys);

}  // namespace tpserve::jinja
