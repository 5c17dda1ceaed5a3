// JSON Schema (and "any JSON object") to a Grammar (grammar.h).
//
// Keywords real schemas use: type (and type lists), properties, required,
// additionalProperties (false, true, a schema), items, prefixItems,
// minItems/maxItems, enum, const, anyOf, oneOf (as anyOf: the instance
// matches at least one; exactly-one is enforced only where the branches
// cannot overlap, else a compile error), allOf (merged where the merge is
// exact, else a compile error), $ref and $defs / definitions (recursion
// included), minLength/maxLength, pattern (regex.h's dialect: ECMA-262
// constructs it lacks are a compile error), minimum/maximum,
// exclusiveMinimum/exclusiveMaximum for integers (and for numbers where the
// bound can be expressed exactly), format (date-time, date, time, email,
// uuid, ipv4, ipv6, uri, hostname), and annotations that constrain nothing
// (title, description, examples, default, $schema, $id, $comment).
// Any other keyword that constrains instances is INVALID_ARGUMENT naming it
// and where it is ("properties.age.multipleOf: not supported"): a schema is
// enforced exactly or refused, never loosened.
//
// Layout: JsonLayout (spec.h): properties in `properties` order; a required
// property cannot be left out, an optional one may be.
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

}  // namespace tpserve::grammar
