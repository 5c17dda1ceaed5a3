// JSON Schema (and "any JSON object") to a Grammar (grammar.h). The grammar's
// sentences are JSON texts, in one layout and spelling (below), of values the
// schema accepts; a schema is enforced exactly or refused (INVALID_ARGUMENT
// naming the keyword and where it is: "properties.age.multipleOf: not
// supported for a divisor that is not an integer"), never loosened. Where the
// grammar is narrower than the schema it says so here ("Restrictions"): a
// valid value may be written in fewer ways, never an invalid one accepted.
//
// Drafts: draft 2020-12 keywords. "$schema" naming draft-04, -06 or -07 gives
// $ref those drafts' meaning (its sibling keywords are ignored; in 2020-12
// they apply too); draft-03 is refused. `items` as an array (with
// `additionalItems`) reads as prefixItems (with items), a boolean
// exclusiveMinimum / exclusiveMaximum as draft 4's modifier of minimum / maximum.
//
// Layout and spelling (JsonLayout, spec.h):
//   * Members: the `properties` in their order, then the names `required`
//     lists that `properties` does not (in `required` order, valued by
//     additionalProperties), then any other names additionalProperties
//     admits (absent = true), none of them a name listed before. An optional
//     property may be left out. A valid value whose members come in another
//     order is written in this one.
//   * kCompact: no whitespace. kIndented: json.dumps(v, indent=2): "{}" and
//     "[]" when empty, else a newline and two spaces per level before each
//     member or element, "," at line ends, ": " after names.
//   * Strings as JSON.stringify / json.dumps(ensure_ascii=False) write them:
//     \" \\ \b \t \n \f \r, \u00xx (lowercase) for the other controls below
//     U+0020, every other character as itself (never \/ or \uXXXX for one).
//     Lengths count code points.
//   * Integers 0 or -?[1-9][0-9]* (no -0, no fraction); other numbers with a
//     fraction and an exponent allowed, but no exponent under
//     minimum / maximum bounds. Values of enum and const as written in the
//     schema, in nlohmann's dump() spelling (1.0 stays 1.0; members in the
//     schema's order).
//
// Keywords:
//   * type (names and lists), enum, const (compared as JSON Schema does:
//     numbers by value, members in any order; enum values that violate their
//     sibling keywords are dropped).
//   * minimum, maximum, exclusiveMinimum, exclusiveMaximum on integers and
//     numbers: regexes over the digits, exact both in exact arithmetic and
//     after rounding to doubles (json_schema_number.h); multipleOf: 1
//     (integers only), an integer divisor with at most 256 multiples between
//     the bounds (listed), or an integer divisor of a power of ten (2, 4, 5,
//     10, 25, 100, ...: the last digits, any bounds); others are refused.
//   * minLength, maxLength, pattern (ECMA-262 with the u flag, search
//     semantics: json_schema_regex.h lists what is supported), format:
//     date-time, date, time, email, uuid, ipv4, ipv6, hostname, uri,
//     uri-reference, json-pointer, byte (strings); int32 (integers in range,
//     as ajv-formats reads it), int64 (integers within +-(2^53 - 1), where
//     JavaScript's are exact); other formats are annotations.
//   * properties, required, additionalProperties, minProperties,
//     maxProperties (counted along the members, at most 4096 count states);
//     items, prefixItems, minItems, maxItems; uniqueItems: false (and true
//     with maxItems <= 1).
//   * allOf: merged (types, bounds and lengths intersected, enums
//     intersected, properties merged name by name with the other side's
//     additionalProperties, items position by position); two patterns or
//     formats on one string are refused.
//   * anyOf: a union; keywords beside it are merged into each branch.
//   * oneOf: the same union, accepted only when no value can match two
//     branches (types apart, ranges or lengths apart, enum values apart, a
//     required property whose values are apart or that one branch forbids);
//     otherwise refused ("use anyOf").
//   * not: of {} or true (no value: a property that must be absent), of false
//     (any value), or of a schema of "type" alone (those types left out;
//     "integer" only together with "number", since 1.0 is an integer too).
//   * $ref ("#", "#/json/pointer", "#anchor", an $id of the document), $defs,
//     definitions; recursion through objects and arrays is recursion in the
//     grammar. A $ref / allOf / anyOf that refers back to itself without an
//     object or array between is refused; a recursion that cannot end (no
//     value satisfies it) is refused as unsatisfiable.
//   * Ignored, as JSON Schema ignores them: title, description, default,
//     examples, $comment, $schema, $id, $anchor, deprecated, readOnly,
//     writeOnly, contentEncoding, contentMediaType, OpenAPI's discriminator and
//     nullable (which therefore does not admit null), x-* and any other
//     unknown keyword.
//   * Refused: any other not, if with then / else, patternProperties, propertyNames,
//     dependencies, dependentRequired, dependentSchemas,
//     unevaluatedProperties, unevaluatedItems, contains, minContains,
//     maxContains, uniqueItems: true, $dynamicRef, $recursiveRef, draft 3's disallow / extends / divisibleBy,
//     a $ref outside the document, the formats duration, idn-email,
//     idn-hostname, iri, iri-reference, uri-template, relative-json-pointer
//     and regex; a pattern or format with minLength / maxLength unless their
//     intersection can be written exactly (the pattern's one variable part a
//     repetition of one character class, or the length already implied).
//   * Unsatisfiable schemas (no value valid) are refused as such.
//
// Restrictions: the member order and the one spelling above; formats are
// subsets of what ajv-formats (full) and python-jsonschema accept (uri needs
// a scheme; hostname at most 7 labels and 253 characters; time and date-time
// with seconds 00-59 and a time zone, "T" and "Z" in capitals; email a
// dot-atom local part; ipv6 without embedded ipv4 or zone); numeric bounds
// past +-(10^20 - 1) move inward to it, digits of a bound past the 40th and
// fraction bounds nearer zero than 1e-30 are rounded inward; maxItems above
// 2^31 - 1 counts as 2^31 - 1; values the schema leaves unconstrained
// (`true`, items or additionalProperties absent) nest at most
// limits.max_nesting levels, and in the indented layout every value does.
//
// Limits (CompileLimits): the text's size (max_spec_bytes) and nesting (2 x
// max_nesting + 2 levels of JSON), compile time (max_time), rules and
// terminals (max_rules), minLength / maxLength above max_automaton_states,
// minItems above 2^31 - 1, more than 64 anyOf / oneOf combinations in one
// schema, anyOf / $ref chains deeper than 256 at one level: INVALID_ARGUMENT
// naming the limit. A string with one long run of one character class
// (maxLength 4000, a pattern's [a-z]{1,500}) is one terminal whose automaton
// counts the run (grammar/counted_dfa.h); a string with two is counted by
// rules over 16-character chunk terminals.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grammar/grammar.h"
#include "grammar/spec.h"

namespace tpserve::grammar {

absl::StatusOr<Grammar> JsonSchemaGrammar(absl::string_view schema_json, JsonLayout layout,
                                          const CompileLimits& limits);
// Any JSON object (the body of any JSON value nested within limits.max_nesting).
absl::StatusOr<Grammar> JsonObjectGrammar(JsonLayout layout, const CompileLimits& limits);

// The same as rules of a larger grammar (a tool call's "arguments", a value
// between tags): the rule matching the schema's values, added to `builder`.
// `depth` is how many objects and arrays the value sits in, which the
// indented layout's whitespace follows (a call's arguments in
// {"name": ..., "arguments": VALUE} are at depth 1); the compact layout
// ignores it. Terminals are shared with the builder's other rules.
// limits.max_rules counts the whole builder.
absl::StatusOr<Symbol> AddJsonSchema(GrammarBuilder& builder, absl::string_view schema_json, JsonLayout layout,
                                     int depth, const CompileLimits& limits);
absl::StatusOr<Symbol> AddJsonObject(GrammarBuilder& builder, JsonLayout layout, int depth,
                                     const CompileLimits& limits);

}  // namespace tpserve::grammar
