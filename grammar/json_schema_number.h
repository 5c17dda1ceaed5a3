// Numbers for the JSON Schema front end (internal to json_schema.cc): exact
// decimals, the bounds minimum / maximum / exclusiveMinimum /
// exclusiveMaximum, and regexes (regex.h's dialect) for the JSON spellings of
// the numbers within bounds.
//
// A bound holds for every spelling the regexes accept both as exact
// arithmetic on the decimal (python-jsonschema: an integer instance is a
// Python int, compared exactly) and after the instance and the bound are
// rounded to doubles (JavaScript, ajv; python-jsonschema for instances with a
// fraction): integer spellings are bounded by the bound's exact value, and
// spellings with a fraction by the nearest double that satisfies the bound in
// both readings. Bounded numbers have no exponent spelling. Where it keeps
// the range nonempty, a bound past +-(10^20 - 1) moves inward to it, and a
// bound's digits past the 40th are rounded inward (a fraction bound nearer
// zero than 1e-30 moves to +-1e-30 or 0): the regexes stay small.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tpserve::grammar::json_internal {

// An exact decimal: ip.fp, ip without leading zeros ("0" below 1), fp without
// trailing zeros; zero is not negative.
struct Dec {
  bool neg = false;
  std::string ip = "0";
  std::string fp;

  bool IsInteger() const { return fp.empty(); }
  bool IsZero() const { return ip == "0" && fp.empty(); }
  std::string Text() const;  // "-12.5", "0", "3"
};

// A JSON number's text (with an optional exponent); nullopt when malformed.
std::optional<Dec> ParseDec(absl::string_view text);
Dec DecFromInt(int64_t v);
Dec DecFromUint(uint64_t v);
Dec ExactDec(double v);     // the double's exact binary value (finite v)
Dec ShortestDec(double v);  // the shortest decimal that reads back as v (finite v)
double ToDouble(const Dec& d);

int Compare(const Dec& a, const Dec& b);  // -1, 0, 1
Dec Negate(Dec d);
Dec Floor(const Dec& d);
Dec Ceil(const Dec& d);
Dec AddOne(const Dec& integer);
Dec SubOne(const Dec& integer);

// One side of a numeric range as the schema gave it.
struct NumBound {
  Dec exact;             // the value as written (an integer) or the double's exact value
  double as_double = 0;  // what JavaScript compares with
  bool exclusive = false;
};
NumBound BoundFromInt(int64_t v, bool exclusive);
NumBound BoundFromUint(uint64_t v, bool exclusive);
NumBound BoundFromDouble(double v, bool exclusive);
// -1 when `a` is the tighter lower bound (the larger), 1 when `b` is, 0 when equal.
int CompareLower(const NumBound& a, const NumBound& b);
int CompareUpper(const NumBound& a, const NumBound& b);

// The integers / fraction spellings within [lower, upper] (nullopt: unbounded).
struct IntRange {
  std::optional<Dec> lo, hi;  // integers, inclusive
  bool Empty() const;
  bool Contains(const Dec& integer) const;
};
IntRange IntegersWithin(const std::optional<NumBound>& lower, const std::optional<NumBound>& upper);
struct FracRange {
  bool empty = false;
  std::optional<Dec> lo, hi;  // inclusive decimal bounds of spellings with a fraction
  bool Contains(const Dec& d) const;
};
FracRange FractionsWithin(const std::optional<NumBound>& lower, const std::optional<NumBound>& upper);

// Regexes of the JSON spellings: integers (0, -?[1-9][0-9]*) within `r`;
// decimals with a fraction (-?(0|[1-9][0-9]*)\.[0-9]+) within `r`. The
// ranges must not be empty.
std::string IntRangeRegex(const IntRange& r);
std::string FracRangeRegex(const FracRange& r);

// The multiples of k within `r` (nonempty), for k = 2^a 5^b (a divisor of a
// power of ten, 10^m, with at most kMaxResidues multiples below it): a
// multiple's last m digits are one of those, so the regex is a range over the
// digits before them times a list of endings. nullopt for other divisors, and
// "" when no multiple lies within `r`.
inline constexpr int64_t kMaxResidues = 200;
std::optional<std::string> MultiplesRegex(const IntRange& r, int64_t k);

// Any integer / any JSON number (with exponents), as regexes.
inline constexpr char kAnyIntegerRegex[] = "0|-?[1-9][0-9]*";
inline constexpr char kAnyNumberRegex[] = "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+\\-]?[0-9]+)?";

}  // namespace tpserve::grammar::json_internal
