// json/strict_json.h: depth and duplicate keys checked before a DOM exists.
#include "json/strict_json.h"

#include <gtest/gtest.h>

#include <string>

namespace tpserve {
namespace {

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(StrictJson, DepthUpToTheLimitAndNoFurther) {
  EXPECT_TRUE(CheckJson(Nested(4), {.max_depth = 4}).ok());
  absl::Status s = CheckJson(Nested(5), {.max_depth = 4});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "nests deeper than 4 levels of arrays and objects");
  // Objects and arrays count alike.
  EXPECT_FALSE(CheckJson(R"({"a": [{"b": [1]}]})", {.max_depth = 3}).ok());
  EXPECT_TRUE(CheckJson(R"({"a": [{"b": [1]}]})", {.max_depth = 4}).ok());
  // A scalar is depth 0.
  EXPECT_TRUE(CheckJson("7", {.max_depth = 0}).ok());
}

// Far past any stack: refused without recursion, and quickly.
TEST(StrictJson, MillionsOfLevelsAreRefusedWithoutRecursion) {
  const std::string deep = Nested(2'000'000);
  EXPECT_FALSE(CheckJson(deep).ok());
  EXPECT_FALSE(ParseJson(deep).ok());
  EXPECT_FALSE(ParseJson<nlohmann::ordered_json>(std::string(2'000'000, '[')).ok()) << "unterminated";
}

TEST(StrictJson, DuplicateKeysAreRefusedPerObject) {
  absl::Status s = CheckJson(R"({"a": 1, "b": {"a": 2}, "a": 3})");
  EXPECT_EQ(s.message(), "repeats the key \"a\" in one object; give each once");
  EXPECT_TRUE(CheckJson(R"({"a": 1, "b": {"a": 2}, "c": [{"a": 1}, {"a": 2}]})").ok());
  EXPECT_TRUE(CheckJson(R"({"a": 1, "a": 3})", {.allow_duplicate_keys = true}).ok());
  // Keys that differ only after an escape are different keys; equal after one are the same.
  EXPECT_FALSE(CheckJson(R"({"\u0061": 1, "a": 2})").ok());
  // A long key is shortened in the message.
  const std::string key(1000, 'k');
  s = CheckJson("{\"" + key + "\": 1, \"" + key + "\": 2}");
  EXPECT_LT(s.message().size(), 200u);
}

// Every value counts, containers too; the fault and the count come back.
TEST(StrictJson, ValuesAreCountedAndBounded) {
  JsonFault fault = JsonFault::kSyntax;
  int64_t values = 0;
  EXPECT_TRUE(CheckJson(R"({"a": [1, 2, {"b": null}]})", {.max_values = 6}, &fault, &values).ok());
  EXPECT_EQ(fault, JsonFault::kNone);
  EXPECT_EQ(values, 6);  // the object, the array, 1, 2, the inner object, null
  absl::Status s = CheckJson(R"({"a": [1, 2, {"b": null}]})", {.max_values = 5}, &fault);
  EXPECT_EQ(fault, JsonFault::kTooManyValues);
  EXPECT_EQ(s.message(), "holds more than 5 values");
  CheckJson(Nested(10), {.max_depth = 3}, &fault).IgnoreError();
  EXPECT_EQ(fault, JsonFault::kTooDeep);
  CheckJson(R"({"a": 1, "a": 2})", {}, &fault).IgnoreError();
  EXPECT_EQ(fault, JsonFault::kDuplicateKey);
  CheckJson(R"({"a": })", {}, &fault).IgnoreError();
  EXPECT_EQ(fault, JsonFault::kSyntax);
}

TEST(StrictJson, SyntaxErrorsSayWhere) {
  absl::Status s = CheckJson(R"({"a": })");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is not valid JSON (byte 7"), absl::string_view::npos) << s;
  EXPECT_FALSE(CheckJson("").ok());
  EXPECT_FALSE(CheckJson("[1] [2]").ok()) << "one value only";
}

TEST(StrictJson, ParseJsonGivesTheValueInEitherFlavour) {
  absl::StatusOr<nlohmann::json> j = ParseJson(R"({"b": 1, "a": [true, null]})");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["a"][0], true);
  absl::StatusOr<nlohmann::ordered_json> o = ParseJson<nlohmann::ordered_json>(R"({"b": 1, "a": 2})");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->begin().key(), "b") << "ordered_json keeps the order";
}

}  // namespace
}  // namespace tpserve
