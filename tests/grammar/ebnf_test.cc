// GBNF (ebnf.h): the dialect of llama.cpp's grammars/README.md, what becomes
// a terminal, and errors with line and column.
#include "grammar/ebnf.h"

#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grammar/matcher.h"

namespace tpserve::grammar {
namespace {

// llama.cpp's grammars/json.gbnf.
constexpr char kJsonGbnf[] = R"gbnf(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [0-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

// llama.cpp's grammars/arithmetic.gbnf (left recursion rewritten by hand there; here as is).
constexpr char kArithmetic[] = R"gbnf(root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)gbnf";

std::string Error(absl::string_view text, CompileLimits limits = {}) {
  auto g = ParseGbnf(text, limits);
  EXPECT_FALSE(g.ok()) << text;
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

std::shared_ptr<const Vocabulary> Bytes() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.push_back("</s>");
  std::vector<bool> special(bytes.size(), false);
  special.back() = true;
  return *Vocabulary::Create(bytes, {256}, special);
}

// Feeds `text` byte by byte; true when every byte is allowed and the end is.
bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, absl::string_view text) {
  Matcher m(g);
  for (unsigned char c : text) {
    if (!m.Accept(c)) return false;
  }
  return m.IsComplete();
}

std::shared_ptr<const CompiledGrammar> MustCompile(absl::string_view text) {
  GrammarSpec spec;
  spec.kind = GrammarSpec::Kind::kEbnf;
  spec.text = std::string(text);
  auto g = Compile(spec, Bytes());
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

TEST(GbnfTest, JsonGrammar) {
  const auto g = MustCompile(kJsonGbnf);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, R"({"a": [1, -2.5e3, true, null, {"b": "x\"\u00e9y"}], "c": {}})"));
  EXPECT_TRUE(Accepts(g, "{\n  \"k\": \"v\"\n}"));
  EXPECT_FALSE(Accepts(g, R"({"a": [1, 2,]})"));
  EXPECT_FALSE(Accepts(g, R"({"a" 1})"));
  EXPECT_FALSE(Accepts(g, R"({"a": 01})"));
  EXPECT_FALSE(Accepts(g, R"([1])"));
}

TEST(GbnfTest, ArithmeticGrammar) {
  const auto g = MustCompile(kArithmetic);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "a+b*(c-1)= 7\n"));
  EXPECT_TRUE(Accepts(g, "x=y\nz1 = (q)\n"));
  EXPECT_FALSE(Accepts(g, "a+=1\n"));
  EXPECT_FALSE(Accepts(g, "a=1"));
}

TEST(GbnfTest, LeftRecursionAndRepetitions) {
  const auto g = MustCompile(
      "root ::= list \";\"\n"
      "list ::= list \",\" item | item\n"
      "item ::= \"x\"{2,3} | \"(\" list \")\" | [\\u00e0-\\u00ff]\n");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "xx,xxx,(xx,(xxx));"));
  EXPECT_TRUE(Accepts(g, "\xC3\xA9;"));
  EXPECT_FALSE(Accepts(g, "x;"));
  EXPECT_FALSE(Accepts(g, "xxxx;"));
  EXPECT_FALSE(Accepts(g, "(xx;"));
}

TEST(GbnfTest, SyntaxDetails) {
  // Comments, '|' continuing on the next line, {m}, {m,}, {,n}, escapes, '.', empty class.
  const auto g = MustCompile(
      "# a comment\n"
      "root ::= a b c d e   # trailing comment\n"
      "  | \"\\x41\\u00e9\\U0001F600\"\n"
      "a ::= \"a\"{2}\n"
      "b ::= \"b\"{1,}\n"
      "c ::= \"c\"{,1}\n"
      "d ::= . [^a-z]\n"
      "e ::= [] | \"e\"\n");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "aabbc\n9e"));
  EXPECT_TRUE(Accepts(g, "aab\xF0\x9F\x98\x80Xe"));
  EXPECT_TRUE(Accepts(g, "A\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(Accepts(g, "aabbc\nxe"));
  EXPECT_FALSE(Accepts(g, "abbc\n9e"));
}

TEST(GbnfTest, RegularRulesBecomeTerminals) {
  auto g = ParseGbnf(kJsonGbnf, {});
  ASSERT_TRUE(g.ok()) << g.status();
  // string, number and ws are regular: one terminal each, inlined; object
  // and array are recursive: rules.
  const std::string dump = g->Dump();
  for (const Grammar::Rule& r : g->rules) {
    if (r.name == "string" || r.name == "number") {
      EXPECT_EQ(r.alternatives.size(), 1u) << dump;
    }
  }
  EXPECT_LE(g->terminals.size(), 16u) << dump;
}

TEST(GbnfTest, ErrorsNameLineAndColumn) {
  EXPECT_TRUE(absl::StrContains(Error("root ::= foo\n"), "line 1, column 10: undefined rule 'foo'")) << Error("root ::= foo\n");
  EXPECT_TRUE(absl::StrContains(Error("a ::= \"x\"\n"), "no rule named 'root'"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= \"x\"\nroot ::= \"y\"\n"), "line 2, column 1: rule 'root' is defined twice"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= (\"x\"\n"), "line 1, column 10: missing ')'"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= \"x\n\"\n"), "unterminated string"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= [a-\n"), "line 1"));
  EXPECT_TRUE(absl::StrContains(Error("root = \"x\"\n"), "expected '::='"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= \"x\" )\n"), "unmatched ')'"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= * \"x\"\n"), "nothing to repeat"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= \"x\"{3,2}\n"), "n < m"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= <[1000]>\n"), "token references"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= \"\\q\"\n"), "line 1, column 11: unknown escape"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= [z-a]\n"), "out of order"));
  EXPECT_TRUE(absl::StrContains(Error("\n\n  root ::= \"a\" @\n"), "line 3, column 16: unexpected character '@'"));
}

TEST(GbnfTest, HostileGrammarsAreRefusedOrCompileQuickly) {
  const absl::Time start = absl::Now();
  // Deep nesting.
  EXPECT_TRUE(absl::StrContains(Error("root ::= " + std::string(100, '(') + "\"x\"" + std::string(100, ')') + "\n"),
                                "max_nesting"));
  EXPECT_TRUE(absl::StrContains(Error("root ::= \"x\"" + std::string(1000, '*') + "\n"), "max_nesting"));
  // Huge counts on a non-regular part: O(log n) rules; on a regular part, a
  // counter (counted_dfa.h), not a million states.
  EXPECT_NE(MustCompile("root ::= (\"(\" root \")\" | \"x\"){1000000000}\n"), nullptr);
  EXPECT_NE(MustCompile("root ::= (\"x\"{1000}){1000}\n"), nullptr);
  // A language whose DFA needs 2^18 states (the 17th byte from the end is
  // 'a'), with no count a counter could take: past the states limit.
  GrammarSpec spec;
  spec.kind = GrammarSpec::Kind::kEbnf;
  spec.text = "root ::= [ab]* \"a\" [ab]{16}\n";
  auto refused = Compile(spec, Bytes());
  ASSERT_FALSE(refused.ok());
  // (Under a sanitizer the states take longer to build than the time limit.)
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "max_automaton_states") ||
              absl::StrContains(refused.status().message(), "max_time"))
      << refused.status();
  // Exponential inlining: a1 ::= a2 a2, a2 ::= a3 a3, ... is bounded.
  std::string doubling = "root ::= a0\n";
  for (int i = 0; i < 40; ++i) absl::StrAppend(&doubling, "a", i, " ::= a", i + 1, " a", i + 1, "\n");
  doubling += "a40 ::= \"x\" | \"y\"\n";
  spec.text = doubling;
  (void)Compile(spec, Bytes());  // compiled or refused; either way quickly
  // Over 1 MB of text.
  spec.text = "root ::= \"" + std::string(1 << 20, 'x') + "\"\n";
  refused = Compile(spec, Bytes());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "max_spec_bytes"));
  // Just under 1 MB: many rules, left recursive.
  std::string big = "root ::= r0\n";
  for (int i = 0; i < 20000 && big.size() < 900'000; ++i) absl::StrAppend(&big, "r", i, " ::= r", i, " \"", i, "\" | r", i + 1, "\n");
  big += "r20000 ::= \"end\"\n";
  spec.text = big;
  (void)Compile(spec, Bytes());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace tpserve::grammar
