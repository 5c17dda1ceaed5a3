// The JSON Schema front end (grammar/json_schema.h), keyword by keyword: the
// grammar's sentences checked through the test oracle, the terminals through
// the engine's regex parser, and the refusals by their messages.
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/grammar/json_schema_test_util.h"

namespace tpserve::grammar {
namespace {

using testing::CompiledSchema;
using testing::CompileForTest;
using ::testing::HasSubstr;

CompiledSchema Compile(const std::string& schema, JsonLayout layout = JsonLayout::kCompact) {
  auto c = CompileForTest(schema, layout);
  EXPECT_TRUE(c.ok()) << schema << "\n" << c.status();
  if (!c.ok()) return {};
  return *std::move(c);
}

void ExpectLanguage(const std::string& schema, const std::vector<std::string>& accepted,
                    const std::vector<std::string>& rejected, JsonLayout layout = JsonLayout::kCompact) {
  CompiledSchema c = Compile(schema, layout);
  if (!c.grammar) return;
  for (const std::string& s : accepted) EXPECT_TRUE(c.Accepts(s)) << schema << "\nshould accept: " << s;
  for (const std::string& s : rejected) EXPECT_FALSE(c.Accepts(s)) << schema << "\nshould reject: " << s;
}

std::string Refusal(const std::string& schema, const CompileLimits& limits = {}) {
  auto g = JsonSchemaGrammar(schema, JsonLayout::kCompact, limits);
  EXPECT_FALSE(g.ok()) << schema << " compiled";
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  return std::string(g.status().message());
}

TEST(JsonSchemaTest, Scalars) {
  ExpectLanguage(R"({"type":"null"})", {"null"}, {"nul", "null ", "0"});
  ExpectLanguage(R"({"type":"boolean"})", {"true", "false"}, {"True", "1"});
  ExpectLanguage(R"({"type":"integer"})", {"0", "-1", "1234567890123456789012345"}, {"-0", "01", "1.0", "1e3", "+1"});
  ExpectLanguage(R"({"type":"number"})", {"0", "-0.5", "1e10", "2.5E-3", "10"}, {".5", "1.", "01", "1e", "--1"});
  ExpectLanguage(R"({"type":"string"})", {R"("")", R"("a b")", R"("\"\\\n\t\u0000\u001f")", "\"\xC3\xA9\xF0\x9F\x98\x80\""},
                 {R"("\u0041")", R"("\/")", "\"a\nb\"", R"("\x")", R"(")"});
  ExpectLanguage(R"({"type":["string","null"]})", {"null", R"("x")"}, {"1"});
  ExpectLanguage("true", {"1", "{}", R"({"a":[null,{"b":"c"}]})", R"("s")"}, {"", "{ }", "[1, 2]"});
}

TEST(JsonSchemaTest, IntegerRangesAreExact) {
  for (auto [lo, hi] : std::vector<std::pair<int, int>>{{-15, 1234}, {0, 9}, {7, 7}, {-300, -17}, {99, 1001}, {-9, 10}}) {
    const std::string schema = absl::StrCat(R"({"type":"integer","minimum":)", lo, R"(,"maximum":)", hi, "}");
    CompiledSchema c = Compile(schema);
    ASSERT_TRUE(c.grammar);
    for (int v = -1500; v <= 1500; ++v) {
      EXPECT_EQ(c.Accepts(std::to_string(v)), v >= lo && v <= hi) << schema << " " << v;
    }
  }
  ExpectLanguage(R"({"type":"integer","exclusiveMinimum":-2,"exclusiveMaximum":3})", {"-1", "0", "2"},
                 {"-2", "3", "-0"});
  ExpectLanguage(R"({"type":"integer","minimum":1.5,"maximum":4.0})", {"2", "4"}, {"1", "5"});
  ExpectLanguage(R"({"type":"integer","minimum":100})", {"100", "99999999999999999999"}, {"99", "-100"});
  ExpectLanguage(R"({"type":"integer","maximum":-100})", {"-100", "-99999999999999999999"}, {"-99", "0", "100"});
  // draft 4's boolean exclusiveMinimum.
  ExpectLanguage(R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","minimum":5,"exclusiveMinimum":true})",
                 {"6"}, {"5"});
}

TEST(JsonSchemaTest, DecimalRangesAreExact) {
  struct Case {
    double lo, hi;
  };
  for (Case c : {Case{-1.25, 3.5}, Case{0, 0.5}, Case{0.07, 0.93}, Case{-2, -0.1}, Case{10.5, 12}}) {
    const std::string schema =
        absl::StrCat(R"({"type":"number","minimum":)", nlohmann::json(c.lo).dump(), R"(,"maximum":)",
                     nlohmann::json(c.hi).dump(), "}");
    CompiledSchema cs = Compile(schema);
    ASSERT_TRUE(cs.grammar);
    for (int k = -1500; k <= 1500; ++k) {
      const double v = k / 100.0;
      const bool in = v >= c.lo - 1e-12 && v <= c.hi + 1e-12;
      const std::string two = absl::StrFormat("%.2f", v);
      EXPECT_EQ(cs.Accepts(two), in) << schema << " " << two;
      if (k % 10 == 0) {
        EXPECT_EQ(cs.Accepts(absl::StrFormat("%.1f", v)), in) << schema << " " << v;
        EXPECT_EQ(cs.Accepts(absl::StrFormat("%.3f", v)), in) << schema << " " << v;
      }
      if (k % 100 == 0) {
        EXPECT_EQ(cs.Accepts(std::to_string(k / 100)), in) << schema << " " << v;
      }
    }
    EXPECT_FALSE(cs.Accepts("1e0")) << "bounded numbers have no exponent spelling";
  }
  ExpectLanguage(R"({"type":"number","exclusiveMinimum":0})", {"0.0001", "5", "1.5"}, {"0", "0.0", "-0.5", "-1"});
  ExpectLanguage(R"({"type":"number","exclusiveMaximum":1.1})", {"1.09", "1", "-3.5"}, {"1.1", "1.10", "2"});
  // Extreme bounds compile to shallow regexes (moved inward past 40 digits / below 1e-30).
  ExpectLanguage(R"({"type":"number","minimum":-1.7976931348623157e308,"maximum":1e308})", {"0", "1.5", "-12345"},
                 {"1e5"});
  ExpectLanguage(R"({"type":"integer","minimum":-1e300,"exclusiveMaximum":1e300})", {"0", "-99999999999999999999"},
                 {"1e5", "-100000000000000000000"});  // bounds past 10^20 move inward
  ExpectLanguage(R"({"type":"number","exclusiveMaximum":0})", {"-0.5", "-1"}, {"0", "0.0", "-0.0"});
  // A bound that is not a double exactly: the fraction spellings obey the double.
  ExpectLanguage(R"({"type":"number","exclusiveMinimum":0.1})", {"0.2", "0.10000000000000002"},
                 {"0.1", "0.10000000000000000001"});
}

TEST(JsonSchemaTest, MultipleOf) {
  ExpectLanguage(R"({"type":"integer","minimum":-7,"maximum":20,"multipleOf":5})", {"-5", "0", "5", "20"},
                 {"-7", "1", "25", "-10"});
  ExpectLanguage(R"({"type":"number","multipleOf":1})", {"3", "-4"}, {"3.5", "3.0"});
  EXPECT_THAT(Refusal(R"({"properties":{"age":{"type":"number","multipleOf":2.5}}})"),
              HasSubstr("properties.age.multipleOf"));
  EXPECT_THAT(Refusal(R"({"type":"integer","multipleOf":3})"), HasSubstr("multipleOf"));
  // A divisor of a power of ten: exact with open bounds, by the last digits.
  struct Case {
    int k;
    std::optional<int> lo, hi;
  };
  for (const Case& c : std::vector<Case>{{2, {}, {}}, {5, -1234, {}}, {25, {}, 777}, {4, -2500, 2600}, {8, 37, {}},
                                         {100, {}, {}}, {125, -999, {}}, {20, 1000, 1900}, {10, 5, 5}}) {
    std::string schema = absl::StrCat(R"({"type":"integer","multipleOf":)", c.k);
    if (c.lo) absl::StrAppend(&schema, R"(,"minimum":)", *c.lo);
    if (c.hi) absl::StrAppend(&schema, R"(,"maximum":)", *c.hi);
    schema += "}";
    if (c.lo && c.hi && *c.lo == 5) {
      EXPECT_THAT(Refusal(schema), HasSubstr("unsatisfiable"));
      continue;
    }
    CompiledSchema cs = Compile(schema);
    ASSERT_TRUE(cs.grammar);
    for (int v = -3000; v <= 3000; ++v) {
      const bool in = v % c.k == 0 && (!c.lo || v >= *c.lo) && (!c.hi || v <= *c.hi);
      EXPECT_EQ(cs.Accepts(std::to_string(v)), in) << schema << " " << v;
    }
    EXPECT_EQ(cs.Accepts("1000000000000000000000"), !c.hi) << schema;
    EXPECT_EQ(cs.Accepts("-1000000000000000000000"), !c.lo) << schema;
  }
}

TEST(JsonSchemaTest, StringLengthsCountCodePoints) {
  ExpectLanguage(R"({"type":"string","minLength":2,"maxLength":3})",
                 {R"("ab")", R"("abc")", "\"\xE6\x97\xA5\xE6\x9C\xAC\"", "\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\"",
                  R"("a\n")", R"("\"\\")"},
                 {R"("a")", R"("abcd")", R"("\n")", "\"\xF0\x9F\x98\x80\""});
}

TEST(JsonSchemaTest, LongStringsAreCounted) {
  const std::string quoted4000 = "\"" + std::string(4000, 'x') + "\"";
  const std::string quoted4001 = "\"" + std::string(4001, 'x') + "\"";
  ExpectLanguage(R"({"type":"string","maxLength":4000})", {R"("")", quoted4000, "\"" + std::string(3999, 'y') + "\\n\""},
                 {quoted4001});
  ExpectLanguage(R"({"type":"string","minLength":100,"maxLength":130})",
                 {"\"" + std::string(100, 'a') + "\"", "\"" + std::string(130, 'a') + "\"",
                  "\"" + std::string(95, 'a') + "\\n\\t\\\"\\\\\\u0001\""},
                 {"\"" + std::string(99, 'a') + "\"", "\"" + std::string(131, 'a') + "\""});
  ExpectLanguage(R"({"type":"string","minLength":200})", {"\"" + std::string(200, 'a') + "\"",
                                                        "\"" + std::string(999, 'a') + "\""},
                 {"\"" + std::string(199, 'a') + "\""});
  ExpectLanguage(R"({"type":"string","pattern":"^id-[a-z]{1,500}!$"})", {R"("id-a!")", "\"id-" + std::string(500, 'q') + "!\""},
                 {R"("id-!")", "\"id-" + std::string(501, 'q') + "!\"", R"("id-A!")"});
  // Two long runs cannot share one counter: chunks of rules.
  ExpectLanguage(R"({"type":"string","pattern":"^[a-z]{60}-[0-9]{1,70}$"})",
                 {"\"" + std::string(60, 'k') + "-" + std::string(70, '7') + "\"", "\"" + std::string(60, 'k') + "-0\""},
                 {"\"" + std::string(59, 'k') + "-0\"", "\"" + std::string(60, 'k') + "-" + std::string(71, '7') + "\"",
                  "\"" + std::string(60, 'k') + "-\""});
  for (int n : {64, 65, 96, 127, 128, 129}) {
    CompiledSchema c = Compile(absl::StrCat(R"({"type":"string","maxLength":)", n, "}"));
    ASSERT_TRUE(c.grammar);
    for (int len : {0, 1, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 130}) {
      EXPECT_EQ(c.Accepts("\"" + std::string(static_cast<size_t>(len), 'z') + "\""), len <= n) << n << " " << len;
    }
  }
}

// OpenAI's strict mode: every property required, additionalProperties false,
// optional values as a union with null. Exactly the listed members, in order.
TEST(JsonSchemaTest, OpenAiStrictSchemas) {
  const std::string strict = R"({"type":"object","properties":{"city":{"type":"string"},)"
                             R"("unit":{"type":["string","null"],"enum":["c","f",null]},)"
                             R"("when":{"type":"object","properties":{"day":{"type":"integer"}},)"
                             R"("required":["day"],"additionalProperties":false}},)"
                             R"("required":["city","unit","when"],"additionalProperties":false})";
  ExpectLanguage(strict, {R"({"city":"Oslo","unit":null,"when":{"day":3}})", R"({"city":"","unit":"f","when":{"day":-1}})"},
                 {R"({"city":"Oslo","unit":null})",                           // a required member missing
                  R"({"city":"Oslo","unit":"c","when":{"day":3},"x":1})",     // an extra member
                  R"({"city":"Oslo","unit":"c","when":{"day":3,"hour":1}})",  // an extra nested member
                  R"({"unit":"c","city":"Oslo","when":{"day":3}})",           // another order
                  R"({"city":"Oslo","unit":"k","when":{"day":3}})"});
  // Without additionalProperties (absent = allowed, as JSON Schema says): other
  // names after the declared ones, never a declared one twice.
  ExpectLanguage(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})",
                 {R"({"a":1})", R"({"a":1,"b":[true]})"}, {R"({"b":1})", R"({"a":1,"a":2})"});
  // OpenAPI's nullable is an unknown keyword to JSON Schema: it admits nothing.
  ExpectLanguage(R"({"type":"string","nullable":true})", {R"("x")"}, {"null"});
}

TEST(JsonSchemaTest, NotOfTypes) {
  ExpectLanguage(R"({"not":{"type":"string","description":"anything but a string"}})", {"1", "1.5", "null", "{}", "[]"},
                 {R"("a")", R"("")"});
  ExpectLanguage(R"({"type":["string","null"],"not":{"type":"null"}})", {R"("x")"}, {"null"});
  ExpectLanguage(R"({"not":{"type":["number","boolean"]}})", {R"("x")", "null"}, {"1", "1.0", "-2e3", "true"});
  // not {} (or true) is false: a property that must be absent.
  ExpectLanguage(R"({"type":"object","properties":{"a":{"not":{}},"b":{"not":true}}})", {"{}", R"({"c":1})"},
                 {R"({"a":1})", R"({"b":null})"});
  ExpectLanguage(R"({"type":"integer","not":false})", {"3"}, {"3.5"});
}

TEST(JsonSchemaTest, Patterns) {
  ExpectLanguage(R"({"type":"string","pattern":"^[a-z]+$"})", {R"("abc")"}, {R"("")", R"("ab1")", R"("ABC")"});
  ExpectLanguage(R"({"type":"string","pattern":"b"})", {R"("abc")", R"("b")", R"("\nb\n")"}, {R"("xyz")", R"("")"});
  ExpectLanguage(R"({"type":"string","pattern":"^a\"b\\\\c$"})", {R"("a\"b\\c")"}, {R"("a"b\c")", R"("ab")"});
  ExpectLanguage(R"({"type":"string","pattern":"^\\d{3}-\\d{4}$","maxLength":8})", {R"("555-1234")"},
                 {R"("5551234")", R"("555-12345")"});
  ExpectLanguage(R"({"type":"string","pattern":"^[a-z]+$","maxLength":3})", {R"("abc")", R"("a")"},
                 {R"("abcd")", R"("")"});
  ExpectLanguage(R"({"type":"string","pattern":"^(foo|bar)x*$","minLength":5})", {R"("fooxx")", R"("barxxx")"},
                 {R"("foox")", R"("foo")"});
  ExpectLanguage(R"({"type":"string","pattern":"^.$"})", {R"("a")", "\"\xF0\x9F\x98\x80\"", R"("\t")"},
                 {R"("\n")", R"("ab")"});
  ExpectLanguage(R"({"type":"string","pattern":"^\\S+@\\S+$"})", {R"("a@b")"}, {R"("a @b")", R"("ab")"});
  EXPECT_THAT(Refusal(R"({"properties":{"s":{"type":"string","pattern":"abc","maxLength":5}}})"),
              HasSubstr("properties.s.pattern"));
  EXPECT_THAT(Refusal(R"({"type":"string","pattern":"(?=a)b"})"), HasSubstr("lookaround"));
  EXPECT_THAT(Refusal(R"({"type":"string","pattern":"(a)\\1"})"), HasSubstr("backreference"));
  EXPECT_THAT(Refusal(R"({"type":"string","pattern":"\\bword"})"), HasSubstr("pattern"));
  // A pattern that constrains no string type: other types are untouched.
  ExpectLanguage(R"({"type":["integer","string"],"pattern":"^a"})", {"5", R"("ab")"}, {R"("b")"});
}

TEST(JsonSchemaTest, Formats) {
  ExpectLanguage(R"({"type":"string","format":"date"})", {R"("2024-02-29")", R"("2000-02-29")", R"("2023-12-31")"},
                 {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")", R"("23-01-01")"});
  ExpectLanguage(R"({"type":"string","format":"date-time"})",
                 {R"("2024-01-01T12:00:00Z")", R"("2024-01-01T23:59:59.123+05:30")"},
                 {R"("2024-01-01 12:00:00Z")", R"("2024-01-01T24:00:00Z")", R"("2024-01-01T12:00:00")"});
  ExpectLanguage(R"({"type":"string","format":"time"})", {R"("08:30:00Z")", R"("08:30:00-01:00")"}, {R"("8:30:00Z")"});
  ExpectLanguage(R"({"type":"string","format":"email"})", {R"("a.b+c@example.co.uk")"},
                 {R"("a@b")", R"("@example.com")", R"("a b@example.com")", R"("a..b@example.com")"});
  ExpectLanguage(R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
                 {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"});
  ExpectLanguage(R"({"type":"string","format":"ipv4"})", {R"("192.168.0.1")", R"("0.0.0.0")"},
                 {R"("256.1.1.1")", R"("01.1.1.1")", R"("1.1.1")"});
  ExpectLanguage(R"({"type":"string","format":"ipv6"})", {R"("::1")", R"("::")", R"("2001:db8::8a2e:370:7334")",
                                                           R"("1:2:3:4:5:6:7:8")"},
                 {R"("1:2:3:4:5:6:7:8:9")", R"(":::")", R"("12345::")"});
  ExpectLanguage(R"({"type":"string","format":"hostname"})", {R"("example.com")", R"("a-b.c")"},
                 {R"("-a.com")", R"("a..b")", R"("a_b.com")"});
  ExpectLanguage(R"({"type":"string","format":"uri"})",
                 {R"("https://example.com/a/b?c=d#e")", R"("mailto:a@b.c")", R"("urn:isbn:0451450523")"},
                 {R"("example.com")", R"("/relative")", R"("http://exa mple.com")"});
  // Formats apply to strings only; unknown formats are annotations.
  ExpectLanguage(R"({"type":["string","integer"],"format":"date"})", {"5", R"("2020-01-01")"}, {R"("x")"});
  ExpectLanguage(R"({"type":"string","format":"color-hex"})", {R"("anything")"}, {});
  ExpectLanguage(R"({"type":"integer","format":"int32"})", {"2147483647", "-2147483648"}, {"2147483648"});
  EXPECT_THAT(Refusal(R"({"type":"string","format":"duration"})"), HasSubstr("format"));
  EXPECT_THAT(Refusal(R"({"type":"string","format":"date","pattern":"^2"})"), HasSubstr("cannot be enforced"));
}

TEST(JsonSchemaTest, EnumAndConst) {
  ExpectLanguage(R"({"enum":["a",1,null,{"x":[1,2]},[true],2.5]})",
                 {R"("a")", "1", "null", R"({"x":[1,2]})", "[true]", "2.5"},
                 {R"("b")", "2", R"({"x":[1,2,3]})", R"({ "x":[1,2]})"});
  ExpectLanguage(R"({"type":"string","enum":["a",1,"b"]})", {R"("a")", R"("b")"}, {"1"});
  ExpectLanguage(R"({"const":"\u00e9\u0000\"x"})", {"\"\xC3\xA9\\u0000\\\"x\""}, {R"("\u00e9\u0000\"x")"});
  ExpectLanguage(R"({"enum":["ab","abc"],"maxLength":2})", {R"("ab")"}, {R"("abc")"});
  ExpectLanguage(R"({"enum":["2024-01-01","nope"],"format":"date"})", {R"("2024-01-01")"}, {R"("nope")"});
  EXPECT_THAT(Refusal(R"({"type":"integer","enum":["a","b"]})"), HasSubstr("unsatisfiable"));
}

TEST(JsonSchemaTest, ObjectsKeepPropertyOrderAndOptionalMembers) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
      "c":{"type":"boolean"},"d":{"type":"null"}},"required":["b"],"additionalProperties":false})";
  ExpectLanguage(schema,
                 {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({"b":"x","c":true})", R"({"a":1,"b":"x","c":false,"d":null})",
                  R"({"b":"x","d":null})"},
                 {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x","e":1})", R"({"b":"x",})", R"({,"b":"x"})",
                  R"({"b":"x","c":true,"c":true})"});
  ExpectLanguage(R"({"properties":{"a":{},"b":{}},"additionalProperties":false})",
                 {"{}", R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"}, {R"({"b":2,"a":1})", R"({"c":1})"});
}

TEST(JsonSchemaTest, AdditionalProperties) {
  // Absent: any other name after the declared ones, never a declared name again.
  ExpectLanguage(R"({"properties":{"a":{"type":"integer"}}})",
                 {R"({"a":1,"zz":[true]})", R"({"zz":1})", R"({"x":1,"y":{"a":"s"}})", "{}", R"({"ab":1,"":2})"},
                 {R"({"a":"x"})", R"({"a":1,"a":2})", R"({"zz":1,"a":1})"});
  ExpectLanguage(R"({"properties":{"a":{"type":"integer"}}})", {"[]", "1"}, {});  // no "type": other values pass
  ExpectLanguage(R"({"additionalProperties":{"type":"integer"}})", {R"({"x":1,"y":2})", "{}", "5", R"("s")"},
                 {R"({"x":"s"})"});
  ExpectLanguage(R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":{"type":"string"}})",
                 {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({"a":1,"b":"x","c":"y"})"},
                 {R"({"a":1})", R"({"b":1})", R"({"b":"x","a":1})"});
  EXPECT_THAT(Refusal(R"({"type":"object","required":["b"],"additionalProperties":false})"), HasSubstr("unsatisfiable"));
  ExpectLanguage(R"({"type":"object","properties":{"a\"b":{"const":1},"\u00fc":{"const":2}},"additionalProperties":false})",
                 {R"({"a\"b":1})", "{\"\xC3\xBC\":2}", "{\"a\\\"b\":1,\"\xC3\xBC\":2}"}, {R"({"\u00fc":2})"});
}

TEST(JsonSchemaTest, PropertyCounts) {
  const std::string abc = R"("properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}})";
  ExpectLanguage("{" + abc + R"(,"additionalProperties":false,"minProperties":2})",
                 {R"({"a":1,"b":2})", R"({"a":1,"c":3})", R"({"b":2,"c":3})", R"({"a":1,"b":2,"c":3})"},
                 {"{}", R"({"a":1})", R"({"c":3})"});
  ExpectLanguage("{" + abc + R"(,"additionalProperties":false,"maxProperties":1})", {"{}", R"({"a":1})", R"({"c":3})"},
                 {R"({"a":1,"b":2})"});
  ExpectLanguage("{" + abc + R"(,"required":["b"],"minProperties":2,"maxProperties":3})",
                 {R"({"a":1,"b":2})", R"({"b":2,"x":null})", R"({"b":2,"c":3,"y":[]})", R"({"a":1,"b":2,"c":3})"},
                 {R"({"b":2})", R"({"a":1,"b":2,"c":3,"z":1})", R"({"b":2,"x":1,"y":2,"z":3})"});
  ExpectLanguage(R"({"type":"object","minProperties":2})", {R"({"x":1,"y":2})", R"({"x":1,"y":2,"z":3})"},
                 {"{}", R"({"x":1})"});
  ExpectLanguage(R"({"type":"object","minProperties":1,"maxProperties":1})", {R"({"x":1})"}, {"{}", R"({"x":1,"y":2})"},
                 JsonLayout::kCompact);
  ExpectLanguage(R"({"type":"object","maxProperties":2,"properties":{"a":{}}})", {"{\n  \"a\": 1,\n  \"q\": 2\n}", "{}"},
                 {"{\n  \"a\": 1,\n  \"q\": 2,\n  \"r\": 3\n}"}, JsonLayout::kIndented);
  EXPECT_THAT(Refusal(R"({"type":"object","properties":{"a":{}},"required":["a"],"maxProperties":0})"),
              HasSubstr("unsatisfiable"));
  EXPECT_THAT(Refusal(R"({"type":"object","additionalProperties":false,"minProperties":1})"), HasSubstr("unsatisfiable"));
}

TEST(JsonSchemaTest, Arrays) {
  ExpectLanguage(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})", {"[1,2]", "[1,2,3]"},
                 {"[]", "[1]", "[1,2,3,4]", "[1,\"a\"]", "[1, 2]"});
  ExpectLanguage(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
                 {"[]", R"(["a"])", R"(["a",1])"}, {R"(["a",1,2])", "[1]"});
  ExpectLanguage(R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"null"},"minItems":2})",
                 {R"(["a",null])", R"(["a",null,null])"}, {R"(["a"])", "[]", R"(["a",1])"});
  ExpectLanguage(R"({"$schema":"http://json-schema.org/draft-04/schema#","items":[{"type":"integer"}],"additionalItems":false})",
                 {"[]", "[1]", "{}"}, {"[1,2]", R"(["a"])"});
  ExpectLanguage(R"({"type":"array","maxItems":1000000000,"items":{"type":"integer"}})", {"[]", "[1,2,3]"}, {"[1,]"});
  ExpectLanguage(R"({"type":"array","minItems":40,"items":{"const":0}})",
                 {"[" + absl::StrJoin(std::vector<std::string>(40, "0"), ",") + "]",
                  "[" + absl::StrJoin(std::vector<std::string>(41, "0"), ",") + "]"},
                 {"[" + absl::StrJoin(std::vector<std::string>(39, "0"), ",") + "]"});
  ExpectLanguage(R"({"type":"array","uniqueItems":true,"maxItems":1})", {"[]", "[1]"}, {"[1,1]"});
  EXPECT_THAT(Refusal(R"({"type":"array","uniqueItems":true})"), HasSubstr("uniqueItems: not supported"));
}

TEST(JsonSchemaTest, AnyOfAndNullable) {
  ExpectLanguage(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"null"}]})", {"null", R"("ab")"},
                 {R"("abc")", "1"});
  // anyOf with siblings: each branch merged with them.
  ExpectLanguage(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
      "additionalProperties":false,"anyOf":[{"required":["a"]},{"required":["b"]}]})",
                 {R"({"a":1})", R"({"b":1})", R"({"a":1,"b":2})"}, {"{}"});
}

TEST(JsonSchemaTest, OneOfOnlyWhenDisjoint) {
  ExpectLanguage(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", {R"("a")", "1"}, {"1.5", "null"});
  const std::string tagged = R"({"oneOf":[
      {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},
      {"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}]})";
  ExpectLanguage(tagged, {R"({"kind":"circle","r":1})", R"({"kind":"square","side":2})"}, {R"({"kind":"circle"})"});
  ExpectLanguage(R"({"oneOf":[{"type":"integer","maximum":0},{"type":"integer","minimum":1}]})", {"0", "1"}, {"0.5"});
  ExpectLanguage(R"({"oneOf":[{"enum":[1,2]},{"enum":[3]}]})", {"1", "3"}, {"4"});
  EXPECT_THAT(Refusal(R"({"oneOf":[{"type":"integer"},{"minimum":2}]})"), HasSubstr("oneOf"));
  EXPECT_THAT(Refusal(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})"), HasSubstr("branches 0 and 1"));
}

TEST(JsonSchemaTest, AllOfMerges) {
  ExpectLanguage(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}}}]})",
                 {R"({"a":1,"b":"x"})", R"({"a":1})", R"({"a":1,"c":null})"}, {R"({"b":"x"})", R"({"a":1,"b":2})"});
  ExpectLanguage(R"({"type":"integer","allOf":[{"minimum":0},{"maximum":10},{"exclusiveMaximum":8}]})", {"0", "7"},
                 {"8", "-1"});
  ExpectLanguage(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"additionalProperties":false},{"properties":{"b":{}}}]})",
                 {"{}", R"({"a":1})", "5"}, {R"({"b":1})"});
  EXPECT_THAT(Refusal(R"({"allOf":[{"type":"string"},{"type":"number"}]})"), HasSubstr("unsatisfiable"));
  EXPECT_THAT(Refusal(R"({"allOf":[{"type":"string","pattern":"a"},{"pattern":"b"}]})"), HasSubstr("allOf.1.pattern"));
}

TEST(JsonSchemaTest, RefsAndRecursion) {
  const std::string tree = R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
      "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"],"additionalProperties":false}},
      "$ref":"#/$defs/node"})";
  ExpectLanguage(tree, {R"({"value":1})", R"({"value":1,"children":[{"value":2,"children":[]},{"value":3}]})"},
                 {R"({"value":1,"children":[{}]})", R"({"children":[]})"});
  ExpectLanguage(R"({"definitions":{"a":{"type":"integer"}},"properties":{"x":{"$ref":"#/definitions/a"}},"additionalProperties":false})",
                 {R"({"x":1})"}, {R"({"x":"a"})"});
  ExpectLanguage(R"({"properties":{"foo":{"$ref":"#"}},"additionalProperties":false})",
                 {"{}", R"({"foo":{"foo":{}}})", "1"}, {R"({"bar":1})", R"({"foo":{"bar":1}})"});
  ExpectLanguage(R"({"$defs":{"a~b":{"type":"null"},"c/d":{"type":"boolean"},"e%f":{"type":"integer"}},
      "prefixItems":[{"$ref":"#/$defs/a~0b"},{"$ref":"#/$defs/c~1d"},{"$ref":"#/$defs/e%25f"}],"items":false,"type":"array"})",
                 {"[null,true,1]"}, {"[1]"});
  ExpectLanguage(R"({"$defs":{"n":{"$anchor":"num","type":"number"}},"items":{"$ref":"#num"},"type":"array"})", {"[1.5]"},
                 {R"(["x"])"});
  // 2020-12: $ref beside other keywords means both; draft 7: the siblings are ignored.
  ExpectLanguage(R"({"$defs":{"a":{"type":"array"}},"$ref":"#/$defs/a","maxItems":1})", {"[1]"}, {"[1,2]"});
  ExpectLanguage(R"({"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"type":"array"}},"$ref":"#/definitions/a","maxItems":1})",
                 {"[1,2]"}, {"{}"});
  EXPECT_THAT(Refusal(R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},"$ref":"#/$defs/a"})"),
              HasSubstr("unsatisfiable"));
  EXPECT_THAT(Refusal(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"),
              HasSubstr("refers back to itself"));
  EXPECT_THAT(Refusal(R"({"$ref":"http://example.com/other.json"})"), HasSubstr("$ref"));
  EXPECT_THAT(Refusal(R"({"$ref":"#/$defs/missing"})"), HasSubstr("no such location"));
}

TEST(JsonSchemaTest, RefusedKeywordsNameTheirPath) {
  EXPECT_THAT(Refusal(R"({"not":{"type":"integer"}})"), HasSubstr("not of \"integer\" without \"number\""));
  EXPECT_THAT(Refusal(R"({"properties":{"a":{"not":{"minimum":3}}}})"), HasSubstr("properties.a.not: not supported with \"minimum\""));
  EXPECT_EQ(Refusal(R"({"properties":{"a":{"patternProperties":{"x":{}}}}})"),
            "properties.a.patternProperties: not supported");
  EXPECT_EQ(Refusal(R"({"items":{"contains":{}}})"), "items.contains: not supported");
  EXPECT_EQ(Refusal(R"({"if":{"type":"string"},"then":{"minLength":1}})"), "if: not supported");
  EXPECT_THAT(Refusal(R"({"type":"any"})"), HasSubstr("unknown type"));
  EXPECT_THAT(Refusal(R"({"$schema":"http://json-schema.org/draft-03/schema#"})"), HasSubstr("draft 3"));
  // Annotations and unknown keywords constrain nothing.
  ExpectLanguage(R"({"type":"integer","title":"t","description":"d","examples":[1],"default":2,"x-extra":{"not":1},
      "$comment":"c","deprecated":true,"readOnly":true})",
                 {"1"}, {"\"1\""});
}

TEST(JsonSchemaTest, IndentedLayoutIsJsonDumpsIndent2) {
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array",
      "items":{"type":"string"}},"meta":{"type":"object","properties":{"k":{"type":"integer"}}},
      "e":{"enum":[{"x":[1]}]}},"required":["name"]})";
  const std::vector<std::string> values = {
      R"({"name":"a"})", R"({"name":"a","tags":[]})", R"({"name":"a","tags":["x","y"],"meta":{"k":1}})",
      R"({"name":"a","meta":{}})", R"({"name":"a","e":{"x":[1]},"other":{"z":[1,{"q":null}]}})"};
  CompiledSchema c = Compile(schema, JsonLayout::kIndented);
  ASSERT_TRUE(c.grammar);
  for (const std::string& v : values) {
    const auto j = nlohmann::ordered_json::parse(v);
    EXPECT_TRUE(c.Accepts(j.dump(2))) << j.dump(2);
    EXPECT_FALSE(c.Accepts(j.dump())) << j.dump();
  }
  ExpectLanguage(R"({"type":"array"})", {"[]", "[\n  1,\n  [\n    2\n  ]\n]"}, {"[ ]", "[1]", "[\n1\n]"},
                 JsonLayout::kIndented);
}

// A schema's rule inside a larger grammar: a tool call {"name": ..., "arguments": VALUE}.
TEST(JsonSchemaTest, AddJsonSchemaEmbedsTheValue) {
  const std::string schema = R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer",
      "minimum":1,"maximum":7}},"required":["city"],"additionalProperties":false})";
  for (JsonLayout layout : {JsonLayout::kCompact, JsonLayout::kIndented}) {
    const bool indented = layout == JsonLayout::kIndented;
    GrammarBuilder builder;
    auto args = AddJsonSchema(builder, schema, layout, 1, {});
    ASSERT_TRUE(args.ok()) << args.status();
    auto object = AddJsonObject(builder, layout, 1, {});
    ASSERT_TRUE(object.ok()) << object.status();
    const Symbol root = builder.Rule("call");
    builder.Add(root, {builder.Literal(indented ? "{\n  \"name\": \"get_weather\",\n  \"arguments\": "
                                                : R"({"name":"get_weather","arguments":)"),
                       *args, builder.Literal(indented ? "\n}" : "}")});
    builder.Add(root, {builder.Literal(indented ? "{\n  \"name\": \"other\",\n  \"arguments\": "
                                                : R"({"name":"other","arguments":)"),
                       *object, builder.Literal(indented ? "\n}" : "}")});
    auto g = std::move(builder).Build(root, {});
    ASSERT_TRUE(g.ok()) << g.status();
    auto r = testing::Recognizer::Create(*g);
    ASSERT_TRUE(r.ok()) << r.status();
    auto text = [&](const std::string& v) {
      const auto j = nlohmann::ordered_json::parse(v);
      return indented ? j.dump(2) : j.dump();
    };
    EXPECT_TRUE(r->Accepts(text(R"({"name":"get_weather","arguments":{"city":"Oslo","days":3}})")));
    EXPECT_TRUE(r->Accepts(text(R"({"name":"get_weather","arguments":{"city":"Oslo"}})")));
    EXPECT_TRUE(r->Accepts(text(R"({"name":"other","arguments":{"x":[1,{"y":null}]}})")));
    EXPECT_TRUE(r->Accepts(text(R"({"name":"other","arguments":{}})")));
    EXPECT_FALSE(r->Accepts(text(R"({"name":"get_weather","arguments":{"city":"Oslo","days":9}})")));
    EXPECT_FALSE(r->Accepts(text(R"({"name":"get_weather","arguments":{}})")));
    for (const auto& t : g->terminals) EXPECT_TRUE(CheckRegex(t.regex, {}).ok()) << t.regex;
  }
}

TEST(JsonSchemaTest, JsonObjectGrammar) {
  CompileLimits limits;
  limits.max_nesting = 3;
  auto g = JsonObjectGrammar(JsonLayout::kCompact, limits);
  ASSERT_TRUE(g.ok()) << g.status();
  auto r = testing::Recognizer::Create(*g);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->Accepts("{}"));
  EXPECT_TRUE(r->Accepts(R"({"a":[1,"x",null],"b":{"c":{}}})"));
  EXPECT_TRUE(r->Accepts(R"({"a":{"b":{"c":{}}}})"));
  EXPECT_FALSE(r->Accepts(R"({"a":{"b":{"c":{"d":1}}}})")) << "deeper than max_nesting";
  EXPECT_FALSE(r->Accepts("[]"));
  EXPECT_FALSE(r->Accepts("1"));
  EXPECT_FALSE(r->Accepts("{ }"));
  auto indented = JsonObjectGrammar(JsonLayout::kIndented, {});
  ASSERT_TRUE(indented.ok()) << indented.status();
  auto ri = testing::Recognizer::Create(*indented);
  ASSERT_TRUE(ri.ok());
  EXPECT_TRUE(ri->Accepts(nlohmann::ordered_json::parse(R"({"a":[1,{"b":[]}],"c":{}})").dump(2)));
  for (const auto& t : indented->terminals) EXPECT_TRUE(CheckRegex(t.regex, {}).ok()) << t.regex;
}

}  // namespace
}  // namespace tpserve::grammar
