// The matcher's masks against an independent recognizer
// (reference_recognizer.h): for random grammars and small vocabularies, at
// every step of a random walk, token t is allowed exactly when the output with
// t's bytes appended is still a prefix of some sentence; stop ids exactly when
// the output is a sentence; special ids never. Also Accept / Rollback /
// replay equivalence, and the same grammar through GBNF text.
#include "grammar/matcher.h"

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/sanitizers.h"
#include "grammar/compiled_grammar.h"
#include "grammar/ebnf.h"
#include "grammar/grammar.h"
#include "tests/grammar/reference_recognizer.h"
#include "tests/testing/seed.h"

namespace tpserve::grammar {
namespace {

using testing::RefGrammar;
using testing::RefSymbol;
using testing::Reference;
using testing::Tree;

constexpr char kAlphabet[] = "abc(";

struct TestVocab {
  std::shared_ptr<const Vocabulary> vocab;
  std::vector<std::string> bytes;
  int32_t stop = 0, special = 0;
};

TestVocab MakeVocab(std::mt19937_64& rng) {
  TestVocab v;
  for (const char* c = kAlphabet; *c != '\0'; ++c) v.bytes.emplace_back(1, *c);
  for (int i = 0; i < 40; ++i) {
    std::string s;
    const int n = 2 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) s += kAlphabet[rng() % 4];
    v.bytes.push_back(s);
  }
  for (int i = 0; i < 6; ++i) {  // longer than the short trie's tokens (vocabulary_impl.h): the long trie
    std::string s;
    const int n = 17 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n; ++k) s += kAlphabet[rng() % (i < 3 ? 2 : 4)];
    v.bytes.push_back(s);
  }
  v.bytes.push_back(v.bytes[5]);  // two ids with the same bytes
  v.bytes.push_back("");          // an id with no token
  v.stop = static_cast<int32_t>(v.bytes.size());
  v.bytes.push_back("</s>");
  v.special = static_cast<int32_t>(v.bytes.size());
  v.bytes.push_back("<|x|>");
  std::vector<bool> special(v.bytes.size(), false);
  special[static_cast<size_t>(v.stop)] = special[static_cast<size_t>(v.special)] = true;
  v.vocab = *Vocabulary::Create(v.bytes, {v.stop}, special);
  return v;
}

Tree RandomTree(std::mt19937_64& rng, int depth) {
  Tree t;
  const int kind = depth >= 2 ? static_cast<int>(rng() % 2) : static_cast<int>(rng() % 7);
  if (kind == 0) {
    t.kind = Tree::Kind::kLiteral;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n; ++k) t.text += kAlphabet[rng() % 4];
  } else if (kind == 1) {
    t.kind = Tree::Kind::kSet;
    for (const char* c = kAlphabet; *c != '\0'; ++c) {
      if (rng() % 2 == 0) t.text += *c;
    }
    if (t.text.empty()) t.text = "a";
  } else if (kind == 6) {  // counted: mask classes merge states far from the bound
    t.kind = Tree::Kind::kCount;
    t.kids.push_back(RandomTree(rng, depth + 1));
    t.min = static_cast<int>(rng() % 3);
    t.max = t.min + 1 + static_cast<int>(rng() % 24);
  } else {
    t.kind = std::vector<Tree::Kind>{Tree::Kind::kConcat, Tree::Kind::kAlt, Tree::Kind::kStar,
                                     Tree::Kind::kOptional}[static_cast<size_t>(kind - 2)];
    t.kids.push_back(RandomTree(rng, depth + 1));
    if (kind <= 3) t.kids.push_back(RandomTree(rng, depth + 1));
  }
  return t;
}

RefGrammar RandomGrammar(std::mt19937_64& rng) {
  RefGrammar g;
  const int terminals = 1 + static_cast<int>(rng() % 4), rules = 1 + static_cast<int>(rng() % 4);
  for (int t = 0; t < terminals; ++t) g.terminals.push_back(RandomTree(rng, 0));
  g.rules.resize(static_cast<size_t>(rules));
  for (auto& rule : g.rules) {
    const int alts = 1 + static_cast<int>(rng() % 3);
    for (int a = 0; a < alts; ++a) {
      std::vector<RefSymbol> alt;
      const int n = static_cast<int>(rng() % 4);
      for (int k = 0; k < n; ++k) {
        const bool terminal = rng() % 3 != 0;
        alt.push_back({terminal, static_cast<int>(rng() % static_cast<uint64_t>(terminal ? terminals : rules))});
      }
      rule.push_back(alt);
    }
  }
  return g;
}

Grammar ToGrammar(const RefGrammar& g) {
  GrammarBuilder b;
  std::vector<Symbol> rules, terminals;
  for (size_t r = 0; r < g.rules.size(); ++r) rules.push_back(b.Rule(absl::StrCat("r", r)));
  for (const Tree& t : g.terminals) terminals.push_back(b.Terminal(t.Regex()));
  for (size_t r = 0; r < g.rules.size(); ++r) {
    for (const auto& alt : g.rules[r]) {
      std::vector<Symbol> seq;
      for (const RefSymbol& s : alt) seq.push_back(s.terminal ? terminals[static_cast<size_t>(s.id)] : rules[static_cast<size_t>(s.id)]);
      b.Add(rules[r], seq);
    }
  }
  return *std::move(b).Build(rules[static_cast<size_t>(g.start)], {});
}

std::string ToGbnf(const RefGrammar& g) {
  std::string out;
  for (size_t r = 0; r < g.rules.size(); ++r) {
    out += r == 0 ? "root ::= " : absl::StrCat("r", r, " ::= ");
    for (size_t a = 0; a < g.rules[r].size(); ++a) {
      if (a > 0) out += " | ";
      if (g.rules[r][a].empty()) out += "\"\"";
      for (const RefSymbol& s : g.rules[r][a]) {
        out += " ";
        out += s.terminal ? g.terminals[static_cast<size_t>(s.id)].Gbnf() : (s.id == 0 ? "root" : absl::StrCat("r", s.id));
      }
    }
    out += "\n";
  }
  return out;
}

// These tests hold languages to the reference, not time to a limit: the
// compile gets minutes, and a sanitized build (about ten times slower) runs
// fewer rounds of each test (a round is one random grammar and its walk).
#if TPSERVE_ASAN
constexpr int kRoundScale = 5;
#else
constexpr int kRoundScale = 1;
#endif
constexpr absl::Duration kCompileTime = absl::Minutes(2);

// No time limit and no mask item limit: these tests hold the masks to the
// reference however ambiguous the grammar (`r0 ::= "" | r0 x r0` makes more
// than the default 200,000 items a mask even on these 50-token vocabularies).
CompileLimits Untimed() {
  CompileLimits limits;
  limits.max_time = kCompileTime;
  limits.max_mask_items = std::numeric_limits<size_t>::max();
  return limits;
}

// A refusal that names one of CompileLimits' bounds is not a wrong answer:
// nested counted repetitions can pass max_automaton_states (seed 1793831991
// of GbnfTextGivesTheSameMasks, round 26: `(([b(]){2,8}){2,13}` three times
// in a loop). Any other refusal must be of a grammar that matches nothing.
bool RefusedForALimit(const absl::Status& status) {
  return absl::IsInvalidArgument(status) && absl::StrContains(status.message(), "(CompileLimits::");
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileIr(const Grammar& g,
                                                                 std::shared_ptr<const Vocabulary> vocab) {
  return internal::Normalize(g, internal::AsImpl(std::move(vocab)), Untimed(), absl::Now() + kCompileTime);
}

bool Bit(const std::vector<uint32_t>& words, int32_t t) { return (words[static_cast<size_t>(t) / 32] >> (t % 32)) & 1; }

// Checks one mask against the reference; returns the allowed tokens but the stop id.
std::vector<int32_t> CheckMask(const RefGrammar& ref, Matcher& m, const std::vector<uint32_t>& words, const TestVocab& v,
                               const std::string& output) {
  const Reference here(ref, output);
  EXPECT_EQ(m.IsComplete(), here.Complete()) << "output '" << output << "'";
  std::vector<int32_t> allowed;
  for (int32_t t = 0; t < v.vocab->size(); ++t) {
    bool expected = false;
    if (t == v.stop) {
      expected = here.Complete();
    } else if (t != v.special && !v.bytes[static_cast<size_t>(t)].empty()) {
      expected = Reference(ref, output + v.bytes[static_cast<size_t>(t)]).Viable();
    }
    EXPECT_EQ(Bit(words, t), expected) << "output '" << output << "' token " << t << " '" << v.bytes[static_cast<size_t>(t)] << "'";
    if (expected && t != v.stop) allowed.push_back(t);
  }
  bool extendable = false;
  for (const char* c = kAlphabet; *c != '\0'; ++c) extendable = extendable || Reference(ref, output + *c).Viable();
  EXPECT_EQ(m.IsTerminated(), here.Complete() && !extendable) << "output '" << output << "'";
  for (int32_t t = 0; t < v.vocab->size(); ++t) {  // a refused token changes nothing
    if (!Bit(words, t)) {
      EXPECT_FALSE(m.Accept(t)) << "token " << t;
      break;
    }
  }
  return allowed;
}

// Checks every mask of a random walk; returns the accepted tokens.
// Without `ref`, only walks (a random allowed token each step) and records the masks.
std::vector<int32_t> CheckWalk(const RefGrammar* ref, std::shared_ptr<const CompiledGrammar> compiled,
                               const TestVocab& v, std::mt19937_64& rng, std::vector<std::vector<uint32_t>>* masks) {
  Matcher m(compiled);
  std::string output;
  std::vector<int32_t> accepted;
  std::vector<uint32_t> words(MaskWords(v.vocab->size()));
  for (int step = 0; step < 14; ++step) {
    m.FillMask(words);
    if (masks != nullptr) masks->push_back(words);
    std::vector<int32_t> allowed;
    if (ref == nullptr) {
      for (int32_t t = 0; t < v.vocab->size(); ++t) {
        if (Bit(words, t) && t != v.stop) allowed.push_back(t);
      }
    } else {
      allowed = CheckMask(*ref, m, words, v, output);
    }
    if (allowed.empty() || ::testing::Test::HasFailure()) break;
    const int32_t t = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.Accept(t));
    accepted.push_back(t);
    output += v.bytes[static_cast<size_t>(t)];
  }
  return accepted;
}

TEST(MatcherTest, MasksEqualTheReferenceOnRandomGrammars) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 60 / kRoundScale && !HasFailure(); ++round) {
    SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round));
    const TestVocab v = MakeVocab(rng);
    const RefGrammar ref = RandomGrammar(rng);
    const Grammar grammar = ToGrammar(ref);
    SCOPED_TRACE(grammar.Dump());
    auto compiled = CompileIr(grammar, v.vocab);
    if (!compiled.ok()) {
      if (!RefusedForALimit(compiled.status())) {
        EXPECT_FALSE(Reference(ref, "").Viable()) << compiled.status();
      }
      continue;
    }
    CheckWalk(&ref, *compiled, v, rng, nullptr);
  }
}

// The same grammars as GBNF text: regular rules become terminals, runs of
// regular elements merge; the language must not change.
TEST(MatcherTest, GbnfTextGivesTheSameMasks) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 50 / kRoundScale && !HasFailure(); ++round) {
    SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round));
    const TestVocab v = MakeVocab(rng);
    const RefGrammar ref = RandomGrammar(rng);
    const std::string text = ToGbnf(ref);
    SCOPED_TRACE(text);
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::kEbnf;
    spec.text = text;
    auto compiled = Compile(spec, v.vocab, Untimed());
    if (!compiled.ok()) {
      if (!RefusedForALimit(compiled.status())) {
        EXPECT_FALSE(Reference(ref, "").Viable()) << compiled.status();
      }
      continue;
    }
    SCOPED_TRACE((*compiled)->grammar.Dump());
    CheckWalk(&ref, *compiled, v, rng, nullptr);
  }
}

// Rollback restores the masks; a matcher replaying the tokens reaches the same ones.
TEST(MatcherTest, RollbackAndReplayGiveTheSameMasks) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 60 / kRoundScale && !HasFailure(); ++round) {
    SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round));
    const TestVocab v = MakeVocab(rng);
    const RefGrammar ref = RandomGrammar(rng);
    auto compiled = CompileIr(ToGrammar(ref), v.vocab);
    if (!compiled.ok()) continue;
    std::vector<std::vector<uint32_t>> masks;
    const std::vector<int32_t> tokens = CheckWalk(nullptr, *compiled, v, rng, &masks);
    Matcher m(*compiled), replay(*compiled);
    std::vector<uint32_t> words(MaskWords(v.vocab->size()));
    for (size_t i = 0; i < tokens.size(); ++i) {
      ASSERT_TRUE(m.Accept(tokens[i]));
      m.FillMask(words);  // fills the memo of the sets Rollback keeps
    }
    while (m.accepted() > 0) {
      const size_t n = 1 + rng() % m.accepted();
      m.Rollback(n);
      m.FillMask(words);
      EXPECT_EQ(words, masks[m.accepted()]) << "after rolling back to " << m.accepted();
      for (size_t i = m.accepted(); i < tokens.size() && rng() % 2 == 0; ++i) ASSERT_TRUE(m.Accept(tokens[i]));
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      replay.FillMask(words);
      EXPECT_EQ(words, masks[i]);
      ASSERT_TRUE(replay.Accept(tokens[i]));
    }
  }
}

// A grammar whose lexemes may end after almost every byte of almost every
// token (words with optional spaces, and a recursion that keeps it from being
// regular) makes a parser set at each trie node a mask walks: fuzz_grammar
// found one taking 0.2 s a mask on Qwen3's vocabulary. Past
// CompileLimits::max_mask_items the matcher gives up, for good, and says why.
TEST(MatcherTest, AMaskPastItsItemLimitGivesUp) {
  std::vector<std::string> bytes = {" ", "|", ")", "ab", "cd"};
  for (char c = 'a'; c <= 'z'; ++c) bytes.emplace_back(1, c);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 400; ++i) {
    std::string w;
    for (int k = 0, n = 2 + static_cast<int>(rng() % 6); k < n; ++k) w += static_cast<char>('a' + rng() % 26);
    bytes.push_back(w);
  }
  const auto stop = static_cast<int32_t>(bytes.size());
  bytes.push_back("</s>");
  std::vector<bool> special(bytes.size(), false);
  special[static_cast<size_t>(stop)] = true;
  std::shared_ptr<const Vocabulary> vocab = *Vocabulary::Create(bytes, {stop}, special);
  GrammarSpec spec;
  spec.kind = GrammarSpec::Kind::kEbnf;
  spec.text = "root ::= (w \" \"?)*+\nw ::= [a-z]+ | \"|\" root \")\"\n";
  const auto id = [&](const std::string& b) {
    return static_cast<int32_t>(std::find(bytes.begin(), bytes.end(), b) - bytes.begin());
  };

  // Under the default limit the masks are whole: every word allowed.
  auto whole = Compile(spec, vocab);
  ASSERT_TRUE(whole.ok()) << whole.status();
  Matcher fine(*whole);
  std::vector<uint32_t> words(MaskWords(vocab->size()));
  for (const char* t : {"ab", "|", "cd", " "}) {
    fine.FillMask(words);
    ASSERT_TRUE(fine.status().ok()) << fine.status();
    EXPECT_TRUE(Bit(words, id(bytes[40]))) << "before " << t;
    ASSERT_TRUE(fine.Accept(id(t))) << t;
  }

  CompileLimits limits;
  limits.max_mask_items = 1000;
  auto tight = Compile(spec, vocab, limits);
  ASSERT_TRUE(tight.ok()) << tight.status();
  Matcher m(*tight);
  ASSERT_TRUE(m.Accept(id("ab")));
  ASSERT_TRUE(m.IsComplete());
  std::fill(words.begin(), words.end(), ~0u);  // a reused buffer: every word dirty
  const MaskRange range = m.FillMask(words, {0, words.size()});
  EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
  EXPECT_NE(m.status().message().find("more than 1000 parser items (CompileLimits::max_mask_items"), std::string::npos)
      << m.status();
  EXPECT_EQ(range.begin, range.end);
  EXPECT_EQ(words, std::vector<uint32_t>(words.size(), 0u)) << "a mask that gave up allows nothing";
  // For good: nothing is allowed or accepted, not even the stop id of a complete output.
  EXPECT_FALSE(m.IsComplete());
  EXPECT_FALSE(m.Accept(id("cd")));
  EXPECT_FALSE(m.Accept(stop));
  EXPECT_FALSE(m.ForcedToken().has_value());
  m.FillMask(words);
  EXPECT_EQ(words, std::vector<uint32_t>(words.size(), 0u));
  EXPECT_TRUE(absl::IsInvalidArgument(m.status()));
}

}  // namespace
}  // namespace tpserve::grammar
