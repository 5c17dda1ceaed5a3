// Filters, tests, methods of str/dict/list and the globals (range, namespace,
// raise_exception, strftime_now) of the environment transformers renders chat
// templates in (ImmutableSandboxedEnvironment + loopcontrols, tojson with
// ensure_ascii=False). The sandbox lives here: a value exposes only these
// methods, never anything of the process.
#pragma once

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace tpserve::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
// A method some value offers (str.split, dict.items, loop.cycle, ...): the parser
// refuses a call of any other `x.name(...)` at start-up.
bool IsKnownMethod(std::string_view name);
// range, namespace, dict, raise_exception, strftime_now.
bool IsKnownGlobal(std::string_view name);

// `value | name(args)`; throws RenderError.
Value ApplyFilter(std::string_view name, const Value& value, CallArgs& args);
// `value is name(args)`; throws RenderError.
bool ApplyTest(std::string_view name, const Value& value, CallArgs& args);
// `value.name` as Jinja's sandboxed getattr does it: a method of str/dict, then a dict key;
// Undefined when neither (and an error for an attribute of Undefined).
Value GetAttr(const Value& value, const std::string& name);
// `value[key]`: list index (negative from the end), dict key, then attribute; Undefined when missing.
Value GetItem(const Value& value, const Value& key);
// `value[start:stop:step]` on a list or str; null pointers for missing bounds.
Value GetSlice(const Value& value, const Value* start, const Value* stop, const Value* step);
// The globals: range, namespace, raise_exception, strftime_now, dict.
Value GetGlobal(std::string_view name);
// `a in b`.
bool Contains(const Value& container, const Value& item);
// The items `for` walks: list items, dict keys, the code points of a str; Undefined is empty.
List IterateValue(const Value& v);
// Python's a < b for numbers, str, lists; an error otherwise.
bool LessThan(const Value& a, const Value& b);

}  // namespace tpserve::jinja
