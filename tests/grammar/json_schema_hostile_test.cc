// Hostile schemas: each is refused with INVALID_ARGUMENT saying why, or
// compiled, and either way within the compile limit (CompileLimits::max_time)
// and without exhausting the stack.
#include <chrono>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/sanitizers.h"
#include "grammar/json_schema.h"

namespace tpserve::grammar {
namespace {

using ::testing::HasSubstr;

struct Outcome {
  absl::Status status;
  double seconds = 0;
};

Outcome CompileTimed(const std::string& schema, const CompileLimits& limits = {}) {
  const auto start = std::chrono::steady_clock::now();
  auto g = JsonSchemaGrammar(schema, JsonLayout::kCompact, limits);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto gi = JsonSchemaGrammar(schema, JsonLayout::kIndented, limits);
  return {g.ok() ? gi.status() : g.status(), s};
}

// Refused, with `reason` in the message, within the time limit (and margin).
void ExpectRefused(const std::string& what, const std::string& schema, const std::string& reason,
                   const CompileLimits& limits = {}) {
  const Outcome o = CompileTimed(schema, limits);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kInvalidArgument) << what << ": " << o.status;
  // The deadline (parsing the text included) is checked between steps of
  // bounded work; the margin is for a loaded machine.
  EXPECT_LT(o.seconds, absl::ToDoubleSeconds(limits.max_time) + 1.0) << what;
  std::cout << what << ": " << o.status.message().substr(0, 160) << " (" << o.seconds << " s)\n";
#if TPSERVE_ASAN
  // Ten times slower: the time limit may come first.
  if (absl::StrContains(o.status.message(), "max_time")) return;
#endif
  EXPECT_THAT(std::string(o.status.message()), HasSubstr(reason)) << what;
}

std::string Nested(int levels, const std::string& open, const std::string& leaf, const std::string& close) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += open;
  s += leaf;
  for (int i = 0; i < levels; ++i) s += close;
  return s;
}

TEST(JsonSchemaHostileTest, DeepNesting) {
  ExpectRefused("40000 levels of properties", Nested(40000, R"({"properties":{"a":)", "{}", "}}"), "nests deeper");
  ExpectRefused("100000 levels of items", Nested(100000, R"({"items":)", "{}", "}"), "nests deeper");
  // Within the limit: compiles.
  auto ok = JsonSchemaGrammar(Nested(60, R"({"type":"array","items":)", R"({"type":"integer"})", "}"),
                              JsonLayout::kIndented, {});
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(JsonSchemaHostileTest, HugeEnumsAndSchemas) {
  std::string values;
  for (int i = 0; i < 120000; ++i) absl::StrAppend(&values, i ? "," : "", "\"v", i, "\"");
  ExpectRefused("a 1.2 MB enum", absl::StrCat(R"({"enum":[)", values, "]}"), "max_spec_bytes");
  // Just under 1 MB: compiles or is refused by a limit, quickly either way.
  std::string objects;
  for (int i = 0; i < 25000; ++i) absl::StrAppend(&objects, i ? "," : "", R"({"k":[)", i, "]}");
  const Outcome o = CompileTimed(absl::StrCat(R"({"enum":[)", objects, "]}"));
  EXPECT_TRUE(o.status.ok() || o.status.code() == absl::StatusCode::kInvalidArgument) << o.status;
  EXPECT_LT(o.seconds, 4.0);
  std::cout << "25000 object enum values: " << (o.status.ok() ? "compiled" : o.status.ToString()) << " (" << o.seconds
            << " s)\n";
  // 80000 members in one object (unknown keywords): parsed in linear time.
  std::string members;
  for (int i = 0; i < 80000; ++i) absl::StrAppend(&members, i ? "," : "", "\"x", i, "\":0");
  const Outcome wide = CompileTimed(absl::StrCat(R"({"type":"integer",)", members, "}"));
  EXPECT_TRUE(wide.status.ok()) << wide.status;
  EXPECT_LT(wide.seconds, 3.0);
  std::cout << "80000 unknown keywords: " << wide.seconds << " s\n";
  std::string props;
  for (int i = 0; i < 30000; ++i) absl::StrAppend(&props, i ? "," : "", "\"p", i, R"(":{"type":"integer"})");
  ExpectRefused("30000 properties", absl::StrCat(R"({"type":"object","properties":{)", props, "}}"), "max_rules");
}

TEST(JsonSchemaHostileTest, CyclesAndUnsatisfiable) {
  ExpectRefused("$ref cycle with no base case",
                R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/b"}},"required":["x"]},
                    "b":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":1}},"$ref":"#/$defs/a"})",
                "unsatisfiable");
  ExpectRefused("$ref alias loop", R"({"$ref":"#"})", "refers back to itself");
  ExpectRefused("allOf loop", R"({"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})",
                "refers back to itself");
  ExpectRefused("anyOf loop", R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})",
                "refers back to itself");
  ExpectRefused("unsatisfiable allOf", R"({"allOf":[{"type":"integer","minimum":5},{"maximum":4}]})", "unsatisfiable");
  ExpectRefused("unsatisfiable required",
                R"({"type":"object","properties":{"a":false},"required":["a"]})", "unsatisfiable");
  ExpectRefused("empty enum", R"({"enum":[]})", "unsatisfiable");
  ExpectRefused("contradicting lengths", R"({"type":"string","minLength":5,"maxLength":4})", "unsatisfiable");
  // A chain of 5000 aliases at one level, and 5000 nested through anyOf.
  std::string defs;
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&defs, i ? "," : "", "\"d", i, R"(":{"$ref":"#/$defs/d)", i + 1, "\"}");
  const Outcome chain = CompileTimed(absl::StrCat(R"({"$defs":{)", defs, R"(,"d5000":{"type":"string"}},"$ref":"#/$defs/d0"})"));
  EXPECT_TRUE(chain.status.ok()) << chain.status;
  std::string any;
  for (int i = 0; i < 5000; ++i) {
    absl::StrAppend(&any, i ? "," : "", "\"d", i, R"(":{"anyOf":[{"$ref":"#/$defs/d)", i + 1, R"("},{"type":"null"}]})");
  }
  ExpectRefused("5000 anyOf levels", absl::StrCat(R"({"$defs":{)", any, R"(,"d5000":{"type":"string"}},"$ref":"#/$defs/d0"})"),
                "nest more than 256 deep");
}

TEST(JsonSchemaHostileTest, CountsAndCombinations) {
  ExpectRefused("minItems 10^12", R"({"type":"array","minItems":1000000000000})", "minItems");
  ExpectRefused("maxLength 10^9", R"({"type":"string","maxLength":1000000000})", "maxLength");
  ExpectRefused("pattern count 10^9", R"({"type":"string","pattern":"^a{1000000000}$"})", "pattern");
  const Outcome big_max = CompileTimed(R"({"type":"array","maxItems":1000000000000,"minItems":1000000})");
  EXPECT_TRUE(big_max.status.ok()) << "counted repetition costs O(log n) rules: " << big_max.status;
  std::string groups;
  for (int i = 0; i < 12; ++i) {
    absl::StrAppend(&groups, i ? "," : "", R"({"anyOf":[{"minimum":)", i, R"(},{"maximum":)", 100 - i,
                    R"(},{"type":"integer"},{"type":"number"}]})");
  }
  ExpectRefused("4^12 anyOf combinations", absl::StrCat(R"({"allOf":[)", groups, "]}"), "combinations");
  std::string props;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&props, i ? "," : "", "\"p", i, R"(":{"type":"string"})");
  const Outcome wide = CompileTimed(absl::StrCat(R"({"type":"object","properties":{)", props, "}}"));
  EXPECT_TRUE(wide.status.ok()) << "40 optional properties stay linear: " << wide.status;
}

TEST(JsonSchemaHostileTest, TimeLimit) {
  CompileLimits limits;
  limits.max_time = absl::Milliseconds(1);
  std::string props;
  for (int i = 0; i < 3000; ++i) absl::StrAppend(&props, i ? "," : "", "\"p", i, R"(":{"type":"integer","minimum":)", i, "}");
  ExpectRefused("a 1 ms limit", absl::StrCat(R"({"type":"object","properties":{)", props, "}}"), "max_time", limits);
}

}  // namespace
}  // namespace tpserve::grammar
