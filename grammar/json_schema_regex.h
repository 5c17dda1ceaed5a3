// Regular languages of JSON string *values* for the JSON Schema front end
// (internal to json_schema.cc): JSON Schema `pattern` (ECMA-262 syntax, search
// semantics), the `format` regexes, length bounds and "any name but these",
// as a tree over Unicode code points; and that tree spelled as a regex in
// regex.h's dialect over the JSON *text* of the string, in the one spelling
// the grammar allows (the spelling of JSON.stringify, json.dumps with
// ensure_ascii=False and nlohmann's dump): `"` and `\` escaped, U+0008,
// U+0009, U+000A, U+000C, U+000D as \b \t \n \f \r, the other controls below
// U+0020 as \u00xx (lowercase hex), every other character as itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "grammar/utf8_ranges.h"

namespace tpserve::grammar::json_internal {

using internal::CodepointRanges;

// A regular language over code points.
struct Re {
  enum class Kind : uint8_t {
    kEmpty,   // ""
    kSet,     // one code point of `set` (an empty set: no string at all)
    kConcat,  // kids in order
    kAlt,     // any kid
    kRepeat,  // kids[0] min..max times (max < 0: unbounded)
  };
  Kind kind = Kind::kEmpty;
  CodepointRanges set;
  std::vector<Re> kids;
  int64_t min = 0;
  int64_t max = -1;

  static Re Empty() { return Re{}; }
  static Re Set(CodepointRanges set);
  static Re Char(uint32_t cp) { return Set({{cp, cp}}); }
  static Re Concat(std::vector<Re> kids);
  static Re Alt(std::vector<Re> kids);
  static Re Repeat(Re kid, int64_t min, int64_t max);
  static Re Literal(std::u32string_view s);
  static Re Any();  // one code point, any scalar value
};

// Every Unicode scalar value (no surrogates).
CodepointRanges AllScalars();

// Decodes UTF-8 (well formed, as nlohmann's parser leaves strings).
std::u32string DecodeUtf8(absl::string_view s);

// The strings a JSON Schema `pattern` accepts: ECMA-262 syntax with the `u`
// flag and search semantics (unanchored unless ^ / $ say otherwise).
// Supported: literals, escapes (\t \n \v \f \r \0 \cX \xHH \uHHHH \u{H...},
// surrogate pairs, identity escapes), . (any character but line
// terminators), classes, \d \D \w \W \s \S, groups (capturing, (?:...),
// named), alternation, quantifiers (lazy as greedy), and ^ / $ at the start /
// end of a top-level alternative. Anything else (lookaround, backreferences,
// \b, \p{...}, anchors inside groups) is INVALID_ARGUMENT naming it.
absl::StatusOr<Re> ParseEcmaPattern(absl::string_view pattern);

// The named `format` as a language, for the formats json_schema.h lists
// (date-time, date, time, email, uuid, ipv4, ipv6, uri, uri-reference,
// hostname, json-pointer, byte); nullopt for any other name. Each is a subset
// of what ajv-formats (full mode) and python-jsonschema accept.
std::optional<Re> FormatLanguage(absl::string_view format);

// Lengths (in code points) of the strings of `re`: [min, max], max < 0 when
// unbounded. Meaningless when the language is empty.
struct LengthRange {
  int64_t min = 0;
  int64_t max = -1;
};
LengthRange Lengths(const Re& re);
bool IsEmptyLanguage(const Re& re);

// `re` intersected with lengths [min, max] (max < 0: unbounded), when that
// can be written exactly: the bound is redundant, or the one variable-length
// part is a repetition of single characters. nullopt otherwise.
std::optional<Re> WithLength(const Re& re, int64_t min, int64_t max);

// Whether `value` is in the language (for enum values; short strings).
bool Matches(const Re& re, std::u32string_view value);

// Any string but the ones listed (property names outside `properties`).
Re AnyStringExcept(const std::vector<std::u32string>& excluded);

// The language spelled as JSON string content (between the quotes), as a
// regex in regex.h's dialect.
std::string SpellJsonContent(const Re& re);

// `bytes` as a regex in regex.h's dialect matching exactly those bytes.
std::string RegexLiteral(absl::string_view bytes);

}  // namespace tpserve::grammar::json_internal
