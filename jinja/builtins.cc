// Filters, tests, methods and globals. See jinja/builtins.h.
#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>

#include "jinja/error.h"
#include "jinja/utf8.h"

#include <utf8proc.h>

namespace tpserve::jinja {
namespace {

// ---- UTF-8 and Python's notion of whitespace ----

std::vector<std::pair<size_t, size_t>> CodePoints(std::string_view s) {  // (offset, length) each
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    DecodeAt(s, i, &n);
    out.emplace_back(i, n);
  }
  return out;
}

bool IsPyWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

const Text& ArgText(const Value& v, std::string_view what) {
  if (!v.is_string()) Fail(std::string(what) + " needs a str, got " + std::string(v.TypeName()));
  return v.text();
}

// str.strip / lstrip / rstrip: chars == nullptr (or None) strips Python whitespace.
Text Strip(const Text& t, const Value* chars, bool left, bool right) {
  std::string_view s = t.str();
  std::vector<uint32_t> set;
  const bool whitespace = chars == nullptr || chars->is_none();
  if (!whitespace) {
    std::string_view c = ArgText(*chars, "strip(chars)").str();
    for (size_t i = 0, n = 0; i < c.size(); i += n) set.push_back(DecodeAt(c, i, &n));
  }
  auto strip_cp = [&](uint32_t cp) {
    return whitespace ? IsPyWhitespace(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  const auto cps = CodePoints(s);
  size_t b = 0, e = cps.size();
  size_t n = 0;
  while (left && b < e && strip_cp(DecodeAt(s, cps[b].first, &n))) ++b;
  while (right && e > b && strip_cp(DecodeAt(s, cps[e - 1].first, &n))) --e;
  const size_t bb = b < cps.size() ? cps[b].first : s.size();
  const size_t ee = e > 0 && e > b ? cps[e - 1].first + cps[e - 1].second : bb;
  return t.Slice(bb, ee);
}

// True when no byte of `v` can have come from data: a trusted string, a number,
// a list of such. Dicts count as data (their keys carry no origin).
bool AllTrusted(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return v.text().AllTrusted();
    case Value::Kind::kList:
      for (const Value& x : v.list()) {
        if (!AllTrusted(x)) return false;
      }
      return true;
    case Value::Kind::kDict:
    case Value::Kind::kFunction:
      return false;
    default:
      return true;
  }
}

// A result built from new bytes: trusted only when everything it came from was.
Value Derived(std::string s, std::initializer_list<const Value*> from) {
  bool trusted = true;
  for (const Value* v : from) trusted = trusted && (v == nullptr || AllTrusted(*v));
  return Value::String(Text(s, trusted));
}

Value Split(const Text& t, const Value* sep, const Value* maxsplit_v) {
  const std::string& s = t.str();
  int64_t maxsplit = (maxsplit_v && !maxsplit_v->is_none()) ? maxsplit_v->as_int() : -1;
  List parts;
  if (sep == nullptr || sep->is_none()) {
    const auto cps = CodePoints(s);
    size_t i = 0, n = 0;
    auto space_at = [&](size_t k) { return IsPyWhitespace(DecodeAt(s, cps[k].first, &n)); };
    while (i < cps.size()) {
      while (i < cps.size() && space_at(i)) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Value::String(t.Slice(cps[i].first, s.size())));  // Python keeps its trailing space
        break;
      }
      const size_t b = i;
      while (i < cps.size() && !space_at(i)) ++i;
      const size_t end = i < cps.size() ? cps[i].first : s.size();
      parts.push_back(Value::String(t.Slice(cps[b].first, end)));
    }
    return Value::MakeList(std::move(parts));
  }
  const std::string& d = ArgText(*sep, "split(sep)").str();
  if (d.empty()) Fail("split: empty separator");
  size_t b = 0;
  while (true) {
    const size_t at = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) ? std::string::npos : s.find(d, b);
    if (at == std::string::npos) break;
    parts.push_back(Value::String(t.Slice(b, at)));
    b = at + d.size();
  }
  parts.push_back(Value::String(t.Slice(b, s.size())));
  return Value::MakeList(std::move(parts));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t b = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` between every code point and at both ends
    for (auto [off, len] : CodePoints(s)) {
      if (count >= 0 && done >= count) break;
      out += to + s.substr(off, len);
      b = off + len;
      ++done;
    }
    if (count < 0 || done < count) {
      out += s.substr(b) + to;
      return out;
    }
    return out + s.substr(b);
  }
  while (count < 0 || done < count) {
    const size_t at = s.find(from, b);
    if (at == std::string::npos) break;
    out += s.substr(b, at - b) + to;
    b = at + from.size();
    ++done;
  }
  return out + s.substr(b);
}

bool IsCased(uint32_t cp) {
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

// Python's str.lower / upper / capitalize / title, code point by code point with
// utf8proc's simple case mappings (Python's few one-to-many ones, like "ß".upper()
// == "SS", are not applied). Stray bytes are kept as they are.
std::string MapCase(std::string_view s, int mode) {  // 0 lower, 1 upper, 2 capitalize, 3 title, 4 Jinja's title
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  bool word_start = true;  // mode 4: after whitespace or one of -({[< (Jinja's do_title)
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += n) {
    const uint32_t cp = DecodeAt(s, i, &n);
    if (n == 1 && cp >= 0x80) {
      out += s[i];
      prev_cased = false;
      continue;
    }
    const auto c = static_cast<utf8proc_int32_t>(cp);
    utf8proc_int32_t m = c;
    if (mode == 0) m = utf8proc_tolower(c);
    if (mode == 1) m = utf8proc_toupper(c);
    if (mode == 2) m = i == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c);
    if (mode == 3) m = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
    const bool separator = IsPyWhitespace(cp) || (cp < 0x80 && std::string_view("-({[<").find(static_cast<char>(cp)) !=
                                                                     std::string_view::npos);
    if (mode == 4) m = separator ? c : (word_start ? utf8proc_toupper(c) : utf8proc_tolower(c));
    word_start = separator;
    prev_cased = IsCased(cp);
    AppendUtf8(static_cast<uint32_t>(m), out);
  }
  return out;
}

// Python's str.islower (mode 0) / isupper (mode 1): some cased code point, none of the other case.
bool IsCase(std::string_view s, int mode) {
  bool cased = false;
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += n) {
    const auto c = static_cast<utf8proc_int32_t>(DecodeAt(s, i, &n));
    if (!IsCased(static_cast<uint32_t>(c))) continue;
    cased = true;
    if ((mode == 0 ? utf8proc_tolower(c) : utf8proc_toupper(c)) != c) return false;
  }
  return cased;
}

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(CodePoints(v.text().str()).size());
    case Value::Kind::kList: return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict().size());
    default: Fail("object of type '" + std::string(v.TypeName()) + "' has no len()");
  }
}

// The items a for loop or a filter walks: list items, dict keys, str code points.
List Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& kv : v.dict().items()) keys.push_back(Value::String(Text::Data(kv.first)));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (auto [off, len] : CodePoints(v.text().str())) chars.push_back(Value::String(v.text().Slice(off, off + len)));
      return chars;
    }
    default: Fail("'" + std::string(v.TypeName()) + "' object is not iterable");
  }
}

// Python's <, for sort and the comparison operators.
bool Less(const Value& a, const Value& b) {
  if ((a.is_number() || a.kind() == Value::Kind::kBool) && (b.is_number() || b.kind() == Value::Kind::kBool)) {
    return a.as_number() < b.as_number();
  }
  if (a.is_string() && b.is_string()) return a.text().str() < b.text().str();
  if (a.is_list() && b.is_list()) {
    return std::lexicographical_compare(a.list().begin(), a.list().end(), b.list().begin(), b.list().end(), Less);
  }
  Fail("'<' not supported between instances of '" + std::string(a.TypeName()) + "' and '" + std::string(b.TypeName()) + "'");
}

const Value& Arg(CallArgs& args, size_t i, std::string_view name, std::string_view what) {
  if (i < args.positional.size()) return args.positional[i];
  if (const Value* v = args.Named(name)) return *v;
  Fail(std::string(what) + ": missing argument '" + std::string(name) + "'");
}
const Value* OptArg(CallArgs& args, size_t i, std::string_view name) {
  if (i < args.positional.size()) return &args.positional[i];
  return args.Named(name);
}

// ---- tests ----

using TestFn = std::function<bool(const Value&, CallArgs&)>;

const std::map<std::string, TestFn, std::less<>>& Tests() {
  static const auto* tests = new std::map<std::string, TestFn, std::less<>>{
      {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
      {"boolean", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::kBool; }},
      {"true", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::kBool && v.as_bool(); }},
      {"false", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::kBool && !v.as_bool(); }},
      {"integer", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::kInt; }},
      {"float", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::kFloat; }},
      {"number", [](const Value& v, CallArgs&) { return v.is_number() || v.kind() == Value::Kind::kBool; }},
      {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
      {"mapping", [](const Value& v, CallArgs&) { return v.is_dict() && !v.is_namespace(); }},
      {"iterable", [](const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"sequence", [](const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"callable", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::kFunction; }},
      {"odd", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::kInt && v.as_int() % 2 != 0; }},
      {"even", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::kInt && v.as_int() % 2 == 0; }},
      {"lower", [](const Value& v, CallArgs&) { return v.is_string() && IsCase(v.text().str(), 0); }},
      {"upper", [](const Value& v, CallArgs&) { return v.is_string() && IsCase(v.text().str(), 1); }},
      {"divisibleby", [](const Value& v, CallArgs& a) {
         const Value& d = Arg(a, 0, "num", "divisibleby");
         if (!d.is_number() || d.as_number() == 0) Fail("divisibleby: needs a non-zero number");
         return std::fmod(v.as_number(), d.as_number()) == 0;
       }},
      {"equalto", [](const Value& v, CallArgs& a) { return v.Equals(Arg(a, 0, "other", "equalto")); }},
      {"eq", [](const Value& v, CallArgs& a) { return v.Equals(Arg(a, 0, "other", "eq")); }},
      {"ne", [](const Value& v, CallArgs& a) { return !v.Equals(Arg(a, 0, "other", "ne")); }},
      {"lt", [](const Value& v, CallArgs& a) { return Less(v, Arg(a, 0, "other", "lt")); }},
      {"gt", [](const Value& v, CallArgs& a) { return Less(Arg(a, 0, "other", "gt"), v); }},
      {"le", [](const Value& v, CallArgs& a) { return !Less(Arg(a, 0, "other", "le"), v); }},
      {"ge", [](const Value& v, CallArgs& a) { return !Less(v, Arg(a, 0, "other", "ge")); }},
      {"in", [](const Value& v, CallArgs& a) { return Contains(Arg(a, 0, "seq", "in"), v); }},
      {"sameas", [](const Value& v, CallArgs& a) {
         const Value& o = Arg(a, 0, "other", "sameas");
         if (v.kind() != o.kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.kind() == Value::Kind::kBool) return v.as_bool() == o.as_bool();
         return v.Equals(o) && !v.is_list() && !v.is_dict();
       }},
  };
  return *tests;
}

// Applies the test named by args[0] (with the rest as its arguments) for select/reject.
bool RunNamedTest(const Value& item, const CallArgs& args, size_t first) {
  if (args.positional.size() <= first) return item.Truthy();
  const Value& name = args.positional[first];
  if (!name.is_string() || !IsKnownTest(name.text().str())) Fail("select/reject: unknown test " + name.Repr());
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1, args.positional.end());
  return ApplyTest(name.text().str(), item, rest);
}

// ---- filters ----

using FilterFn = std::function<Value(const Value&, CallArgs&)>;

Value JoinFilter(const Value& v, CallArgs& a) {
  const Value* sep = OptArg(a, 0, "d");
  const Value* attr = OptArg(a, 1, "attribute");
  Text out;
  bool first = true;
  for (const Value& item : Iterate(v)) {
    if (!first && sep != nullptr) out.Append(sep->ToText());
    first = false;
    out.Append((attr ? GetItem(item, *attr) : item).ToText());
  }
  return Value::String(std::move(out));
}

Value ToJsonFilter(const Value& v, CallArgs& a) {
  const Value* indent = OptArg(a, 0, "indent");
  const Value* sort = a.Named("sort_keys");
  int n = -1;
  if (indent != nullptr && !indent->is_none()) {
    if (indent->kind() != Value::Kind::kInt || indent->as_int() < 0 || indent->as_int() > 32) Fail("tojson: indent must be an int in 0..32");
    n = static_cast<int>(indent->as_int());
  }
  return Derived(ToJson(v, n, sort != nullptr && sort->Truthy()), {&v});
}

Value SelectFilter(const Value& v, CallArgs& a, bool keep, bool by_attr) {
  List out;
  for (const Value& item : Iterate(v)) {
    bool pass;
    if (by_attr) {
      const Value& attr = Arg(a, 0, "attribute", "selectattr");
      pass = RunNamedTest(GetItem(item, attr), a, 1);
    } else {
      pass = RunNamedTest(item, a, 0);
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

Value MapFilter(const Value& v, CallArgs& a) {
  List out;
  const Value* attr = a.Named("attribute");
  const Value* def = a.Named("default");
  for (const Value& item : Iterate(v)) {
    if (attr != nullptr) {
      Value got = GetItem(item, *attr);
      out.push_back(got.is_undefined() && def ? *def : got);
    } else {
      const Value& name = Arg(a, 0, "filter", "map");
      if (!name.is_string() || !IsKnownFilter(name.text().str())) Fail("map: unknown filter " + name.Repr());
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      out.push_back(ApplyFilter(name.text().str(), item, rest));
    }
  }
  return Value::MakeList(std::move(out));
}

Value ItemsOf(const Value& v) {
  if (v.is_undefined()) return Value::MakeList({});
  if (!v.is_dict()) Fail("items: expected a mapping, got " + std::string(v.TypeName()));
  List out;
  for (const auto& [k, x] : v.dict().items()) out.push_back(Value::MakeList({Value::String(Text::Data(k)), x}, /*is_tuple=*/true));
  return Value::MakeList(std::move(out));
}

Value IntFilter(const Value& v, CallArgs& a) {
  const Value* def = OptArg(a, 0, "default");
  if (v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool) return Value::Int(static_cast<int64_t>(v.as_number()));
  if (v.kind() == Value::Kind::kFloat && std::isfinite(v.as_number()) && std::fabs(v.as_number()) < 9e18) {
    return Value::Int(static_cast<int64_t>(v.as_number()));
  }
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = Strip(v.text(), nullptr, true, true).str();
      const long long i = std::stoll(s, &used);
      if (used == s.size()) return Value::Int(i);
    } catch (const std::exception&) {
    }
  }
  return def ? *def : Value::Int(0);
}

const std::map<std::string, FilterFn, std::less<>>& Filters() {
  static const auto* filters = new std::map<std::string, FilterFn, std::less<>>{
      {"length", [](const Value& v, CallArgs&) { return Value::Int(Length(v)); }},
      {"count", [](const Value& v, CallArgs&) { return Value::Int(Length(v)); }},
      {"trim", [](const Value& v, CallArgs& a) { return Value::String(Strip(v.ToText(), OptArg(a, 0, "chars"), true, true)); }},
      {"tojson", ToJsonFilter},
      {"items", [](const Value& v, CallArgs&) { return ItemsOf(v); }},
      {"join", JoinFilter},
      {"string", [](const Value& v, CallArgs&) { return Value::String(v.ToText()); }},
      {"int", IntFilter},
      {"float", [](const Value& v, CallArgs&) {
         if (v.is_number() || v.kind() == Value::Kind::kBool) return Value::Float(v.as_number());
         try { return Value::Float(std::stod(v.ToText().str())); } catch (const std::exception&) { return Value::Float(0); }
       }},
      {"abs", [](const Value& v, CallArgs&) {
         if (v.kind() == Value::Kind::kInt) return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
         if (!v.is_number()) Fail("abs: bad operand type " + std::string(v.TypeName()));
         return Value::Float(std::fabs(v.as_number()));
       }},
      {"default", [](const Value& v, CallArgs& a) {
         const Value* b = OptArg(a, 1, "boolean");
         const bool use = v.is_undefined() || (b && b->Truthy() && !v.Truthy());
         const Value* d = OptArg(a, 0, "default_value");
         return use ? (d ? *d : Value::String(Text::Trusted(""))) : v;
       }},
      {"first", [](const Value& v, CallArgs&) { List l = Iterate(v); return l.empty() ? Value::Undefined("first of an empty sequence") : l.front(); }},
      {"last", [](const Value& v, CallArgs&) { List l = Iterate(v); return l.empty() ? Value::Undefined("last of an empty sequence") : l.back(); }},
      {"upper", [](const Value& v, CallArgs&) { return Derived(MapCase(v.ToText().str(), 1), {&v}); }},
      {"lower", [](const Value& v, CallArgs&) { return Derived(MapCase(v.ToText().str(), 0), {&v}); }},
      {"capitalize", [](const Value& v, CallArgs&) { return Derived(MapCase(v.ToText().str(), 2), {&v}); }},
      {"title", [](const Value& v, CallArgs&) { return Derived(MapCase(v.ToText().str(), 4), {&v}); }},
      {"replace", [](const Value& v, CallArgs& a) {
         const Value& from = Arg(a, 0, "old", "replace");
         const Value& to = Arg(a, 1, "new", "replace");
         const Value* count = OptArg(a, 2, "count");
         return Derived(Replace(v.ToText().str(), from.ToText().str(), to.ToText().str(),
                                count && count->kind() == Value::Kind::kInt ? count->as_int() : -1),
                        {&v, &from, &to});
       }},
      {"list", [](const Value& v, CallArgs&) { return Value::MakeList(Iterate(v)); }},
      {"reverse", [](const Value& v, CallArgs&) {
         if (v.is_string()) {
           Text out;
           auto cps = CodePoints(v.text().str());
           for (auto it = cps.rbegin(); it != cps.rend(); ++it) out.Append(v.text().Slice(it->first, it->first + it->second));
           return Value::String(std::move(out));
         }
         List l = Iterate(v);
         std::reverse(l.begin(), l.end());
         return Value::MakeList(std::move(l));
       }},
      {"sort", [](const Value& v, CallArgs& a) {
         List l = Iterate(v);
         const Value* rev = OptArg(a, 0, "reverse");
         std::stable_sort(l.begin(), l.end(), Less);
         if (rev && rev->Truthy()) std::reverse(l.begin(), l.end());
         return Value::MakeList(std::move(l));
       }},
      {"select", [](const Value& v, CallArgs& a) { return SelectFilter(v, a, true, false); }},
      {"reject", [](const Value& v, CallArgs& a) { return SelectFilter(v, a, false, false); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return SelectFilter(v, a, true, true); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return SelectFilter(v, a, false, true); }},
      {"map", MapFilter},
  };
  return *filters;
}

const std::map<std::string, std::string, std::less<>>& FilterAliases() {
  static const auto* aliases = new std::map<std::string, std::string, std::less<>>{{"d", "default"}, {"e", "string"}};
  return *aliases;
}

// ---- methods of str and dict ----

Value BoundMethod(const Value& self, const std::string& name, std::function<Value(const Value&, CallArgs&)> fn) {
  return Value::MakeFunction({std::string(self.TypeName()) + "." + name,
                              [self, fn = std::move(fn)](CallArgs& a) { return fn(self, a); }},
                             &self);
}

bool StartsOrEnds(const Value& self, CallArgs& a, bool starts) {
  const Value& arg = Arg(a, 0, "prefix", starts ? "startswith" : "endswith");
  std::vector<std::string> options;
  if (arg.is_list()) {
    for (const Value& o : arg.list()) options.push_back(ArgText(o, "startswith/endswith").str());
  } else {
    options.push_back(ArgText(arg, "startswith/endswith").str());
  }
  const std::string& s = self.text().str();
  for (const std::string& o : options) {
    if (starts ? s.rfind(o, 0) == 0 : (s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)) return true;
  }
  return false;
}

Value StrMethod(const Value& self, const std::string& name) {
  using A = CallArgs;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return BoundMethod(self, name, [l, r](const Value& s, A& a) { return Value::String(Strip(s.text(), OptArg(a, 0, "chars"), l, r)); });
  }
  if (name == "split") return BoundMethod(self, name, [](const Value& s, A& a) { return Split(s.text(), OptArg(a, 0, "sep"), OptArg(a, 1, "maxsplit")); });
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return BoundMethod(self, name, [starts](const Value& s, A& a) { return Value::Bool(StartsOrEnds(s, a, starts)); });
  }
  static const std::map<std::string, int, std::less<>> kCase = {{"lower", 0}, {"upper", 1}, {"capitalize", 2}, {"title", 3}};
  if (auto it = kCase.find(name); it != kCase.end()) {
    const int mode = it->second;
    return BoundMethod(self, name, [mode](const Value& s, A&) { return Derived(MapCase(s.text().str(), mode), {&s}); });
  }
  if (name == "replace") return BoundMethod(self, name, [](const Value& s, A& a) { return ApplyFilter("replace", s, a); });
  if (name == "find") {
    return BoundMethod(self, name, [](const Value& s, A& a) {
      const size_t at = s.text().str().find(ArgText(Arg(a, 0, "sub", "find"), "find").str());
      return Value::Int(at == std::string::npos ? -1 : static_cast<int64_t>(CodePoints(s.text().str().substr(0, at)).size()));
    });
  }
  if (name == "join") {
    return BoundMethod(self, name, [](const Value& s, A& a) {
      CallArgs j;
      j.positional.push_back(s);
      return JoinFilter(Arg(a, 0, "iterable", "join"), j);
    });
  }
  return Value::Undefined("'str object' has no attribute '" + name + "'");
}

Value DictMethod(const Value& self, const std::string& name) {
  if (name == "items") return BoundMethod(self, name, [](const Value& d, CallArgs&) { return ItemsOf(d); });
  if (name == "keys") return BoundMethod(self, name, [](const Value& d, CallArgs&) { return Value::MakeList(Iterate(d)); });
  if (name == "values") {
    return BoundMethod(self, name, [](const Value& d, CallArgs&) {
      List out;
      for (const auto& kv : d.dict().items()) out.push_back(kv.second);
      return Value::MakeList(std::move(out));
    });
  }
  if (name == "get") {
    return BoundMethod(self, name, [](const Value& d, CallArgs& a) {
      const Value& key = Arg(a, 0, "key", "get");
      const Value* found = key.is_string() ? d.dict().Find(key.text().str()) : nullptr;
      const Value* def = OptArg(a, 1, "default");
      return found ? *found : (def ? *def : Value::None());
    });
  }
  return Value();
}

}  // namespace

bool IsKnownMethod(std::string_view name) {
  static constexpr std::string_view kMethods[] = {
      "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "lower", "upper", "capitalize", "title",
      "replace", "find", "join",                // str (StrMethod)
      "items", "keys", "values", "get",         // dict (DictMethod)
      "cycle"};                                 // loop (Interpreter::ExecFor)
  return std::find(std::begin(kMethods), std::end(kMethods), name) != std::end(kMethods);
}

bool IsKnownGlobal(std::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

bool IsKnownFilter(std::string_view name) { return Filters().count(name) != 0 || FilterAliases().count(name) != 0; }
bool IsKnownTest(std::string_view name) { return Tests().count(name) != 0; }

Value ApplyFilter(std::string_view name, const Value& value, CallArgs& args) {
  if (auto a = FilterAliases().find(name); a != FilterAliases().end()) name = a->second;
  auto it = Filters().find(name);
  if (it == Filters().end()) Fail("unsupported filter '" + std::string(name) + "'");
  return it->second(value, args);
}

bool ApplyTest(std::string_view name, const Value& value, CallArgs& args) {
  auto it = Tests().find(name);
  if (it == Tests().end()) Fail("unsupported test '" + std::string(name) + "'");
  return it->second(value, args);
}

Value GetAttr(const Value& v, const std::string& name) {
  if (v.is_undefined()) {
    Fail(v.undefined_hint().empty() ? "an undefined value has no attribute '" + name + "'" : v.undefined_hint());
  }
  if (!name.empty() && name[0] == '_') return Value::Undefined("access to attribute '" + name + "' is unsafe");
  if (v.is_string()) return StrMethod(v, name);
  if (v.is_dict()) {
    if (!v.is_namespace()) {
      Value m = DictMethod(v, name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* f = v.dict().Find(name)) return *f;
    return Value::Undefined("'" + std::string(v.is_namespace() ? "Namespace" : "dict object") + "' has no attribute '" + name + "'");
  }
  return Value::Undefined("'" + std::string(v.TypeName()) + " object' has no attribute '" + name + "'");
}

Value GetItem(const Value& v, const Value& key) {
  if (v.is_undefined()) Fail(v.undefined_hint().empty() ? "an undefined value has no items" : v.undefined_hint());
  if (v.is_list() && (key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool)) {
    const auto n = static_cast<int64_t>(v.list().size());
    int64_t i = static_cast<int64_t>(key.as_number());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("list index " + std::to_string(key.as_int()) + " out of range");
    return v.list()[static_cast<size_t>(i)];
  }
  if (v.is_string() && key.kind() == Value::Kind::kInt) {
    const auto cps = CodePoints(v.text().str());
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(cps.size());
    if (i < 0 || i >= static_cast<int64_t>(cps.size())) return Value::Undefined("string index out of range");
    const auto [off, len] = cps[static_cast<size_t>(i)];
    return Value::String(v.text().Slice(off, off + len));
  }
  if (v.is_dict() && key.is_string()) {
    if (const Value* f = v.dict().Find(key.text().str())) return *f;
  }
  if (key.is_string()) return GetAttr(v, key.text().str());
  return Value::Undefined("'" + std::string(v.TypeName()) + " object' has no item " + key.Repr());
}

Value GetSlice(const Value& v, const Value* start, const Value* stop, const Value* step) {
  auto as_int = [](const Value* x, int64_t def) {
    if (x == nullptr || x->is_none()) return def;
    if (x->kind() != Value::Kind::kInt) Fail("slice indices must be integers or None");
    return x->as_int();
  };
  const int64_t st = as_int(step, 1);
  if (st == 0) Fail("slice step cannot be zero");
  const bool is_str = v.is_string();
  if (!is_str && !v.is_list()) Fail("'" + std::string(v.TypeName()) + "' object is not subscriptable with a slice");
  const auto cps = is_str ? CodePoints(v.text().str()) : std::vector<std::pair<size_t, size_t>>{};
  const int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(v.list().size());
  auto clamp = [&](int64_t i, bool neg_step) {
    if (i < 0) i += n;
    if (neg_step) return std::clamp<int64_t>(i, -1, n - 1);
    return std::clamp<int64_t>(i, 0, n);
  };
  int64_t b = start && !start->is_none() ? clamp(as_int(start, 0), st < 0) : (st > 0 ? 0 : n - 1);
  int64_t e = stop && !stop->is_none() ? clamp(as_int(stop, 0), st < 0) : (st > 0 ? n : -1);
  List items;
  Text text;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (is_str) {
      const auto [off, len] = cps[static_cast<size_t>(i)];
      text.Append(v.text().Slice(off, off + len));
    } else {
      items.push_back(v.list()[static_cast<size_t>(i)]);
    }
  }
  return is_str ? Value::String(std::move(text)) : Value::MakeList(std::move(items));
}

bool Contains(const Value& c, const Value& item) {
  if (c.is_string()) return c.text().str().find(ArgText(item, "'in <string>'").str()) != std::string::npos;
  if (c.is_list()) {
    for (const Value& x : c.list()) {
      if (x.Equals(item)) return true;
    }
    return false;
  }
  if (c.is_dict()) return item.is_string() && c.dict().Find(item.text().str()) != nullptr;
  if (c.is_undefined()) return false;
  Fail("argument of type '" + std::string(c.TypeName()) + "' is not iterable");
}

namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox MAX_RANGE

Value Range(CallArgs& a) {
  int64_t v[3] = {0, 0, 1};
  const size_t n = a.positional.size();
  if (n < 1 || n > 3) Fail("range: takes 1 to 3 integers");
  for (size_t i = 0; i < n; ++i) {
    if (a.positional[i].kind() != Value::Kind::kInt) Fail("range: arguments must be integers");
  }
  if (n == 1) {
    v[1] = a.positional[0].as_int();
  } else {
    v[0] = a.positional[0].as_int();
    v[1] = a.positional[1].as_int();
    if (n == 3) v[2] = a.positional[2].as_int();
  }
  if (v[2] == 0) Fail("range: step must not be zero");
  List out;
  for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) Fail("range: more than 100000 items (sandbox limit)");
    out.push_back(Value::Int(i));
  }
  return Value::MakeList(std::move(out));
}

Value MakeNamespace(CallArgs& a, bool is_namespace) {
  Dict d;
  for (const Value& p : a.positional) {
    if (!p.is_dict()) Fail(std::string(is_namespace ? "namespace" : "dict") + ": positional arguments must be mappings");
    for (const auto& [k, v] : p.dict().items()) d.Set(k, v);
  }
  for (const auto& [k, v] : a.named) d.Set(k, v);
  return Value::MakeDict(std::move(d), is_namespace);
}

Value StrftimeNow(CallArgs& a) {
  const Value& fmt = Arg(a, 0, "format", "strftime_now");
  const std::string& f = ArgText(fmt, "strftime_now").str();
  if (f.size() > 256) Fail("strftime_now: the format is longer than 256 bytes");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[1024];
  const size_t n = std::strftime(buf, sizeof(buf), f.c_str(), &tm);
  return Derived(std::string(buf, n), {&fmt});
}

}  // namespace

Value GetGlobal(std::string_view name) {
  if (name == "range") return Value::MakeFunction({"range", Range});
  if (name == "namespace") return Value::MakeFunction({"namespace", [](CallArgs& a) { return MakeNamespace(a, true); }});
  if (name == "dict") return Value::MakeFunction({"dict", [](CallArgs& a) { return MakeNamespace(a, false); }});
  if (name == "strftime_now") return Value::MakeFunction({"strftime_now", StrftimeNow});
  if (name == "raise_exception") {
    return Value::MakeFunction({"raise_exception", [](CallArgs& a) -> Value {
                                  const Value* m = OptArg(a, 0, "message");
                                  throw RenderError(RenderError::Kind::kRaised, m ? m->ToText().str() : "raise_exception()");
                                }});
  }
  return Value::Undefined("'" + std::string(name) + "' is undefined");
}

List IterateValue(const Value& v) { return Iterate(v); }
bool LessThan(const Value& a, const Value& b) { return Less(a, b); }

}  // namespace tpserve::jinja
