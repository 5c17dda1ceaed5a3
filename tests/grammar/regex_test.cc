// The regex dialect (regex.h): constructs, errors, limits, and the compiled
// DFA against Python's `re` (re.fullmatch, ASCII) on random patterns and
// strings. The Python comparison skips with a message without python3.
#include "grammar/regex.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grammar/dfa.h"
#include "tests/testing/seed.h"

namespace tpserve::grammar {
namespace {

using internal::CompileRegex;
using internal::Dfa;

bool FullMatch(const Dfa& dfa, absl::string_view s) {
  int32_t state = dfa.start;
  for (unsigned char c : s) {
    if (state < 0) return false;
    state = dfa.Next(state, c);
  }
  return state >= 0 && dfa.accepting[static_cast<size_t>(state)];
}

Dfa MustCompile(absl::string_view regex) {
  auto dfa = CompileRegex(regex, 100'000, absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(dfa.ok()) << regex << ": " << dfa.status();
  return dfa.ok() ? *std::move(dfa) : Dfa{};
}

std::string Refusal(absl::string_view regex, CompileLimits limits = {}) {
  const absl::Status status = CheckRegex(regex, limits);
  EXPECT_FALSE(status.ok()) << regex;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  return std::string(status.message());
}

TEST(RegexTest, Constructs) {
  struct Case {
    const char* regex;
    std::vector<const char*> yes, no;
  };
  const std::vector<Case> cases = {
      {"a(b|c)*d?", {"a", "abcbd", "ad"}, {"", "abdd", "b"}},
      {"^[a-c]{2,3}$", {"ab", "cca"}, {"a", "abca"}},
      {"x{3}", {"xxx"}, {"xx", "xxxx"}},
      {"x{2,}", {"xx", "xxxxx"}, {"x"}},
      {"x{,2}", {"", "x", "xx"}, {"xxx"}},
      {"a{", {"a{"}, {"a"}},
      {"[]a]+", {"]", "a]a"}, {"", "b"}},
      {"[^a]", {"b", "\xC3\xA9", "\xE2\x82\xAC"}, {"a", "\n\n"}},
      {".", {"x", "\xF0\x9F\x98\x80"}, {"\n", "\xC3", "\xED\xA0\x80"}},
      {"\\d+\\.\\d*", {"12.", "0.5"}, {".5", "a.1"}},
      {"\\w\\W\\s\\S", {"a- x", "_\t\t_"}, {"aa x"}},
      {"\\x41\\u00e9\\u{1F600}", {"A\xC3\xA9\xF0\x9F\x98\x80"}, {"A"}},
      {"[\\d\\-x]", {"5", "-", "x"}, {"y"}},
      {"(?:ab)+?|(?<n>c)", {"abab", "c"}, {"a", "abc"}},
      {"\\/\\.\\*", {"/.*"}, {"/a"}},
      {"\xC3\xA9+", {"\xC3\xA9\xC3\xA9"}, {"e"}},
      {"[\xC3\xA0-\xC3\xBF]", {"\xC3\xA0", "\xC3\xBF", "\xC3\xA9"}, {"\xC3\x9F", "a"}},
      {"a|^b$|c", {"a", "b", "c"}, {"bc"}},
  };
  for (const Case& c : cases) {
    const Dfa dfa = MustCompile(c.regex);
    for (const char* s : c.yes) EXPECT_TRUE(FullMatch(dfa, s)) << c.regex << " should match '" << s << "'";
    for (const char* s : c.no) EXPECT_FALSE(FullMatch(dfa, s)) << c.regex << " should not match '" << s << "'";
  }
}

TEST(RegexTest, RawBytesStandForThemselves) {
  const std::string bytes = "a\xFF\x80z";
  const Dfa dfa = MustCompile(EscapeRegexLiteral(bytes));
  EXPECT_TRUE(FullMatch(dfa, bytes));
  EXPECT_FALSE(FullMatch(dfa, "a"));
  const std::string meta = "a.b*c\\d(e)[f]{g}|^$?+\n\x01";
  EXPECT_TRUE(FullMatch(MustCompile(EscapeRegexLiteral(meta)), meta));
  EXPECT_FALSE(FullMatch(MustCompile(EscapeRegexLiteral(meta)), "axb*c\\d(e)[f]{g}|^$?+\n\x01"));
}

TEST(RegexTest, RefusesNonRegularConstructsWithOffset) {
  EXPECT_TRUE(absl::StrContains(Refusal("a(?=b)"), "lookaround")) << Refusal("a(?=b)");
  EXPECT_TRUE(absl::StrContains(Refusal("ab(?<!c)"), "offset 2"));
  EXPECT_TRUE(absl::StrContains(Refusal("(a)\\1"), "backreference"));
  EXPECT_TRUE(absl::StrContains(Refusal("\\bword"), "\\b"));
  EXPECT_TRUE(absl::StrContains(Refusal("a^b"), "'^'"));
  EXPECT_TRUE(absl::StrContains(Refusal("a$b"), "'$'"));
  EXPECT_TRUE(absl::StrContains(Refusal("(?i)abc"), "not supported"));
  EXPECT_TRUE(absl::StrContains(Refusal("a**+"), "possessive"));
  EXPECT_TRUE(absl::StrContains(Refusal("*a"), "nothing to repeat"));
  EXPECT_TRUE(absl::StrContains(Refusal("(ab"), "missing ')'"));
  EXPECT_TRUE(absl::StrContains(Refusal("ab)"), "unmatched ')'"));
  EXPECT_TRUE(absl::StrContains(Refusal("[abc"), "unterminated"));
  EXPECT_TRUE(absl::StrContains(Refusal("[z-a]"), "out of order"));
  EXPECT_TRUE(absl::StrContains(Refusal("\\p{L}"), "property"));
  EXPECT_TRUE(absl::StrContains(Refusal("a{3,2}"), "max < min"));
  EXPECT_TRUE(absl::StrContains(Refusal("\\q"), "unknown escape"));
  EXPECT_TRUE(absl::StrContains(Refusal(std::string(1000, '(') + std::string(1000, ')')), "deeper"));
}

TEST(RegexTest, HostilePatternsCompileOrAreRefusedQuickly) {
  const absl::Time start = absl::Now();
  for (const char* ok : {"(a*)*b", "(a|aa)*c", "(a+)+$", "(.*a){12}", "(x+x+)+y", "(\\w+\\s?)*$"}) {
    const Dfa dfa = MustCompile(ok);
    EXPECT_LT(dfa.num_states(), 10'000) << ok;
  }
  // One long repeat is a counted automaton (counted_dfa.h): its iteration's
  // states and a counter. Two cannot share a counter: a state per count.
  EXPECT_TRUE(CheckRegex("(a{1000}){1000}", {}).ok());
  EXPECT_TRUE(CheckRegex("((a{100}){100}){100}", {}).ok());
  EXPECT_TRUE(absl::StrContains(Refusal("(a{1000}b){1000}c{1000}"), "max_automaton_states"));
  EXPECT_TRUE(absl::StrContains(Refusal("((a{100}){100}){100}b{100}"), "max_automaton_states"));
  EXPECT_TRUE(CheckRegex("a{1000000000}", {}).ok());
  EXPECT_TRUE(absl::StrContains(Refusal("a{1000000000}b{1000000000}"), "max_automaton_states"));
  EXPECT_TRUE(absl::StrContains(Refusal("a{99999999999}"), "above"));
  // Exponential subset construction: refused at the state limit.
  CompileLimits small;
  small.max_automaton_states = 5'000;
  EXPECT_TRUE(absl::StrContains(Refusal("[ab]*a[ab]{20}", small), "max_automaton_states"));
  CompileLimits slow;
  slow.max_time = absl::Milliseconds(1);
  Refusal("[ab]*a[ab]{20}", slow);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// ---- against Python's re ----

std::string RandomRegex(std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  std::string atom;
  switch (depth > 2 ? pick(4) : pick(8)) {
    case 0: atom = std::string(1, "abc"[pick(3)]); break;
    case 1: atom = std::vector<std::string>{"[ab]", "[^a]", "[a-c1]", ".", "\\d", "[^\\d]", "\\w", "\\s"}[pick(8)]; break;
    case 2: atom = std::string(1, "ab\n"[pick(3)]) + std::string(1, "bc1"[pick(3)]); break;
    case 3: atom = "(?:)"; break;
    case 4: atom = "(" + RandomRegex(rng, depth + 1) + ")"; break;
    case 5: atom = "(?:" + RandomRegex(rng, depth + 1) + "|" + RandomRegex(rng, depth + 1) + ")"; break;
    default: atom = RandomRegex(rng, depth + 1) + RandomRegex(rng, depth + 1); return atom;
  }
  switch (pick(10)) {
    case 0: return atom + "*";
    case 1: return atom + "+";
    case 2: return atom + "?";
    case 3: return atom + "{" + std::to_string(pick(3)) + "}";
    case 4: return atom + "{" + std::to_string(pick(2)) + "," + std::to_string(2 + pick(2)) + "}";
    case 5: return atom + "{1,}";
    case 6: return atom + "*?";
    default: return atom;
  }
}

std::string RandomText(std::mt19937_64& rng) {
  std::string s;
  const int n = static_cast<int>(rng() % 9);
  for (int i = 0; i < n; ++i) s += "abc1 \n"[rng() % 6];
  return s;
}

TEST(RegexTest, AgreesWithPythonRe) {
  if (std::system("python3 -c 'import re' > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not available";
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  nlohmann::json cases = nlohmann::json::array();
  for (int i = 0; i < 400; ++i) {
    nlohmann::json texts = nlohmann::json::array();
    for (int k = 0; k < 40; ++k) texts.push_back(RandomText(rng));
    cases.push_back({{"regex", RandomRegex(rng, 0)}, {"texts", texts}});
  }
  // Python's re backtracks: a case it cannot decide in 0.2 s is left out (null).
  const std::string dir = ::testing::TempDir() + "/regex_test_" + std::to_string(::getpid());
  const std::string in = dir + "_cases.json", out = dir + "_python.json";
  std::ofstream(in) << cases.dump();
  const std::string script =
      "import json,re,signal,sys\n"
      "class Slow(Exception): pass\n"
      "def alarm(*_): raise Slow()\n"
      "signal.signal(signal.SIGALRM, alarm)\n"
      "def run(c):\n"
      "  signal.setitimer(signal.ITIMER_REAL, 0.2)\n"
      "  try: return [re.fullmatch(c['regex'],t,re.ASCII) is not None for t in c['texts']]\n"
      "  except Slow: return None\n"
      "  finally: signal.setitimer(signal.ITIMER_REAL, 0)\n"
      "cases=json.load(open(sys.argv[1]))\n"
      "json.dump([run(c) for c in cases], open(sys.argv[2],'w'))\n";
  std::ofstream(dir + "_script.py") << script;
  ASSERT_EQ(std::system(("python3 " + dir + "_script.py " + in + " " + out).c_str()), 0);
  const nlohmann::json expected = nlohmann::json::parse(std::ifstream(out));
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string regex = cases[i]["regex"];
    if (expected[i].is_null()) continue;
    const Dfa dfa = MustCompile(regex);
    for (size_t k = 0; k < cases[i]["texts"].size(); ++k) {
      const std::string text = cases[i]["texts"][k];
      EXPECT_EQ(FullMatch(dfa, text), expected[i][k].get<bool>()) << "regex /" << regex << "/ on '" << text << "'";
    }
  }
}

}  // namespace
}  // namespace tpserve::grammar
