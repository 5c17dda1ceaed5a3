// Values with Python semantics. See jinja/value.h.
#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "jinja/error.h"

namespace tpserve::jinja {

const Value* Dict::Find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void Dict::Set(const std::string& key, Value v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(v);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, std::move(v));
}

void Dict::Clear() {
  // Moved out first: freeing the values may free other dicts, never this one mid-change.
  auto items = std::move(items_);
  items_.clear();
  index_.clear();
}

const Value* CallArgs::Named(std::string_view name) const {
  for (const auto& [k, v] : named) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.hint_ = std::move(hint);
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(Text s) {
  Value v;
  v.kind_ = Kind::kString;
  v.text_ = std::make_shared<const Text>(std::move(s));
  return v;
}
namespace {

// The nesting of a value whose deepest child has nesting `deepest`;
// RenderError past Value::kMaxNesting.
int NestingAbove(int deepest) {
  if (deepest >= Value::kMaxNesting) {
    Fail("a list or dict would be nested more than " + std::to_string(Value::kMaxNesting) + " levels deep (render limit)");
  }
  return deepest + 1;
}

}  // namespace

Value Value::MakeList(List items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  int deepest = 0;
  for (const Value& e : items) deepest = std::max(deepest, e.nesting());
  v.nesting_ = NestingAbove(deepest);
  v.is_tuple_ = is_tuple;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::MakeDict(Dict d, bool is_namespace) {
  Value v;
  v.kind_ = Kind::kDict;
  v.is_namespace_ = is_namespace;
  // A namespace is mutable, so its contents' nesting is not fixed; printing and
  // comparing stop at it, and the interpreter frees namespaces flat (interpreter.h).
  if (!is_namespace) {
    int deepest = 0;
    for (const auto& [key, e] : d.items()) deepest = std::max(deepest, e.nesting());
    v.nesting_ = NestingAbove(deepest);
  }
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::MakeFunction(Function f, const Value* bound_to) {
  Value v;
  v.kind_ = Kind::kFunction;
  if (bound_to != nullptr) v.nesting_ = NestingAbove(bound_to->nesting());
  v.fn_ = std::make_shared<const Function>(std::move(f));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j, bool trusted, int depth) {
  if (depth > kMaxJsonDepth) Fail("a template variable is nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(Text(j.get_ref<const std::string&>(), trusted));
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e, trusted, depth + 1));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.Set(k, FromJson(e, trusted, depth + 1));
      return MakeDict(std::move(d));
    }
    default:
      return None();  // binary and discarded values do not come out of JSON text
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !text_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return dict_->size() != 0;
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return is_namespace_ ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits in scientific form, then laid out as Python's repr does.
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const size_t point = static_cast<size_t>(exp) + 1;
    if (digits.size() <= point) {
      out = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  }
  return neg ? "-" + out : out;
}

namespace {

std::string StrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kString:
      return StrRepr(text_->str());
    case Kind::kList: {
      std::string out = is_tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].Repr();
      if (is_tuple_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      if (is_namespace_) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items()) {
        out += (first ? "" : ", ") + StrRepr(k) + ": " + v.Repr();
        first = false;
      }
      return out + "}";
    }
    default:
      return ToText().str();
  }
}

Text Value::ToText() const {
  switch (kind_) {
    case Kind::kUndefined:
      return {};
    case Kind::kNone:
      return Text::Data("None");
    case Kind::kBool:
      return Text::Data(b_ ? "True" : "False");
    case Kind::kInt:
      return Text::Data(std::to_string(i_));
    case Kind::kFloat:
      return Text::Data(FloatRepr(f_));
    case Kind::kString:
      return *text_;
    case Kind::kFunction:
      return Text::Data("<function " + fn_->name + ">");
    default:
      return Text::Data(Repr());
  }
}

bool Value::Equals(const Value& o) const {
  const bool num_a = is_number() || kind_ == Kind::kBool;
  const bool num_b = o.is_number() || o.kind_ == Kind::kBool;
  if (num_a && num_b) {
    if (kind_ != Kind::kFloat && o.kind_ != Kind::kFloat) {
      return (kind_ == Kind::kBool ? b_ : i_) == (o.kind_ == Kind::kBool ? o.b_ : o.i_);
    }
    return as_number() == o.as_number();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return text_->str() == o.text_->str();
    case Kind::kList:
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      }
      return true;
    case Kind::kDict:
      if (is_namespace_ || o.is_namespace_) return dict_ == o.dict_;
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : dict_->items()) {
        const Value* w = o.dict_->Find(k);
        if (w == nullptr || !v.Equals(*w)) return false;
      }
      return true;
    default:
      return fn_ == o.fn_;
  }
}

namespace {

void JsonString(std::string_view s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// A line break and the indentation of `level` (nothing without an indent).
// Appended piece by piece: GCC 12 at -O3 (the demo's Release build) printed
// pages of false -Wrestrict warnings about `"\n" + std::string(...)` (its
// inlined operator+ and insert); scripts/test.sh now builds the demo's
// configuration with warnings as errors.
void AppendNewline(int indent, int level, std::string& out) {
  if (indent < 0) return;
  out.push_back('\n');
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
}

void JsonDump(const Value& v, int indent, bool sort_keys, int depth, std::string& out) {
  if (depth > 100) Fail("tojson: the value is nested more than 100 levels deep");
  const std::string_view item_sep = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      const double f = v.as_number();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : FloatRepr(f);
      return;
    }
    case Value::Kind::kString: JsonString(v.text().str(), out); return;
    case Value::Kind::kList: {
      if (v.list().empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) out += item_sep;
        AppendNewline(indent, depth + 1, out);
        JsonDump(v.list()[i], indent, sort_keys, depth + 1, out);
      }
      AppendNewline(indent, depth, out);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict().size() == 0) { out += "{}"; return; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items()) items.push_back(&kv);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        AppendNewline(indent, depth + 1, out);
        JsonString(items[i]->first, out);
        out += ": ";
        JsonDump(items[i]->second, indent, sort_keys, depth + 1, out);
      }
      AppendNewline(indent, depth, out);
      out += '}';
      return;
    }
    default:
      Fail("tojson: Object of type " + std::string(v.TypeName()) + " is not JSON serializable");
  }
}

}  // namespace

std::string ToJson(const Value& v, int indent, bool sort_keys) {
  std::string out;
  JsonDump(v, indent, sort_keys, 0, out);
  return out;
}

}  // namespace tpserve::jinja
