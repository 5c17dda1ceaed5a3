// The lexer cache's fast paths against the plain walk: a mask computed from a
// reference (another state of the same automaton, or a state of another
// automaton proved alike by EquivalentStates) is exactly the mask a walk of
// the whole trie gives, words, end nodes and grouped ends alike. The
// vocabulary is large enough (random tokens, short and long) that walks pass
// LexerCache's threshold for keeping references, so every path is taken.
#include <algorithm>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "grammar/compiled_grammar.h"
#include "grammar/lexer_cache.h"
#include "grammar/lexer_mask.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary_impl.h"
#include "tests/testing/seed.h"

namespace tpserve::grammar::internal {
namespace {

constexpr char kAlphabet[] = "abcxyz019\"\\:,{} _-.\xC3\xA9";  // é as two bytes

std::shared_ptr<const VocabularyImpl> RandomVocabulary(std::mt19937_64& rng) {
  std::vector<std::string> bytes;
  const size_t n = sizeof(kAlphabet) - 1;
  for (size_t i = 0; i < n; ++i) bytes.emplace_back(1, kAlphabet[i]);
  for (int i = 0; i < 30000; ++i) {
    std::string s;
    const int len = 2 + static_cast<int>(rng() % (i % 6 == 0 ? 30 : 9));  // some longer than the short trie's
    // Every fourth a word of letters and digits only, as BPE vocabularies
    // have: subtrees a pattern's or a string's loop covers whole.
    const size_t letters = i % 4 == 0 ? 9 : n;
    for (int k = 0; k < len; ++k) s += kAlphabet[rng() % letters];
    bytes.push_back(std::move(s));
  }
  std::vector<bool> special(bytes.size(), false);
  return std::make_shared<const VocabularyImpl>(std::move(bytes), std::vector<int32_t>{}, std::move(special));
}

// Distinct states along random walks from the start, at most `limit`.
std::vector<int32_t> SomeStates(const Dfa& dfa, size_t limit, std::mt19937_64& rng) {
  std::vector<int32_t> states = {dfa.start};
  absl::flat_hash_set<int32_t> seen = {dfa.start};
  for (int walk = 0; walk < 40 && states.size() < limit; ++walk) {
    int32_t s = dfa.start;
    for (int step = 0; step < 60 && states.size() < limit; ++step) {
      std::vector<int32_t> next;
      for (int b = 0; b < 256; ++b) {
        if (const int32_t t = dfa.Next(s, static_cast<uint8_t>(b)); t >= 0 && dfa.Extendable(t)) next.push_back(t);
      }
      if (next.empty()) break;
      s = next[rng() % next.size()];
      if (seen.insert(s).second) states.push_back(s);
    }
  }
  std::shuffle(states.begin(), states.end(), rng);
  return states;
}

void ExpectSameMask(const LexerMask& got, const LexerMask& want, size_t words, const std::string& what) {
  std::vector<uint32_t> a(words, 0), b(words, 0);
  got.OrInto(a.data());
  want.OrInto(b.data());
  EXPECT_EQ(a, b) << what;
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.end_nodes, want.end_nodes) << what;
  EXPECT_EQ(got.ends.children, want.ends.children) << what;
  EXPECT_EQ(got.ends.begin, want.ends.begin) << what;
}

TEST(LexerMaskTest, CachedMasksEqualWholeWalks) {
  const uint64_t seed = tpserve::testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::shared_ptr<const VocabularyImpl> vocab = RandomVocabulary(rng);
  const size_t words = MaskWords(vocab->size());
  // Strings as the JSON Schema compiler spells them: unbounded, counted
  // (maxLength), excluding names (a key of additionalProperties), a pattern;
  // and lexemes unlike a string.
  const std::vector<std::string> regexes = {
      R"re("(?:[^"\\\x00-\x1F]|\\["\\/bfnrt])*")re",
      R"re("(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]){0,100}")re",
      R"re("(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]){3,40}")re",
      R"re("(?:(?:[^"\\\x00-\x1Fab]|\\["\\/bfnrt])(?:[^"\\\x00-\x1F]|\\["\\/bfnrt])*|a(?:[^"\\\x00-\x1Fb]|\\["\\/bfnrt])*|ab(?:[^"\\\x00-\x1F]|\\["\\/bfnrt])+)?":)re",
      R"re("[a-z0-9]{22}")re",
      R"re("(?:abc|xyz)[a-z]*")re",
      R"re(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?)re",
      R"re((?:ab|a\{|c:)*,)re",
  };
  // And the terminals JSON Schemas compile to on this vocabulary: keys of
  // additionalProperties beside declared names, strings with maxLength and
  // patterns, numbers.
  const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"abc":{"type":"string"},"ax":{"type":"string","maxLength":100},"b":{"type":"integer"}}})",
      R"({"type":"object","properties":{"xyz":{"type":"string","minLength":3,"maxLength":60},"x1":{"type":"string","pattern":"^[a-z0-9]{22}$"}},"additionalProperties":{"type":"string"}})",
      R"({"type":"object","properties":{"zz":{"type":"number"},"z-a":{"type":"boolean"}},"required":["zz"]})",
      R"({"type":"array","items":{"type":"string","maxLength":200}})",
  };
  std::vector<std::shared_ptr<const TerminalAutomaton>> automata;
  LexerCache& cache = vocab->cache();
  for (const std::string& regex : regexes) {
    auto automaton = cache.Automaton(regex, 100000, absl::InfiniteFuture());
    ASSERT_TRUE(automaton.ok()) << regex << ": " << automaton.status();
    automata.push_back(*automaton);
  }
  for (const std::string& schema : schemas) {
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::kJsonSchema;
    spec.text = schema;
    auto compiled = Compile(spec, vocab);
    ASSERT_TRUE(compiled.ok()) << schema << ": " << compiled.status();
    automata.insert(automata.end(), (*compiled)->automata.begin(), (*compiled)->automata.end());
  }
  int checked = 0;
  for (int round = 0; round < 2; ++round) {  // round 1 finds most masks cached
    for (const auto& automaton : automata) {
      const Dfa& dfa = automaton->dfa;
      if (dfa.start < 0) continue;
      for (int32_t state : SomeStates(dfa, 40, rng)) {
        for (TrieKind kind : {TrieKind::kShort, TrieKind::kLong}) {
          const TokenTrie& trie = kind == TrieKind::kShort ? vocab->short_trie() : vocab->long_trie();
          const auto got = cache.Mask(kind, automaton, state, trie, vocab->size());
          const auto want = ComputeLexerMask({&dfa, state}, trie, vocab->size());
          ExpectSameMask(*got, *want, words, dfa.counted ? "counted" : "plain");
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 400);
  const LexerCache::Stats stats = cache.stats();
  EXPECT_GT(stats.walks, 0);
  EXPECT_GT(stats.from_same, 0);
  EXPECT_GT(stats.from_other, 0);
  std::cerr << "masks: " << stats.walks << " walks, " << stats.from_same << " from the same automaton, "
            << stats.from_other << " from another\n";
}

// The whole walk (the reference every cached path is held to above) against
// Dfa::Next token by token: a token is allowed when every byte of it stays
// live, a node is an end when its path is accepted and it has children. For
// counted automata (the walk keeps the count beside the base state) at
// counts up to, at and past lo and hi, and plain ones; subtrees a state
// loops over taken whole (TrieShortcut) among them.
TEST(LexerMaskTest, WholeWalkEqualsTokenByToken) {
  const uint64_t seed = tpserve::testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::shared_ptr<const VocabularyImpl> vocab = RandomVocabulary(rng);
  const size_t words = MaskWords(vocab->size());
  const std::vector<std::string> regexes = {
      R"re("(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]){0,100}")re", R"re("[a-z0-9]{22}")re", R"re(x(?:ab|c){3,20}y?)re",
      R"re([a-z]{17,40}:)re", R"re("(?:abc|xyz)[a-z]*")re", R"re("[a-z0-9]([-a-z0-9]*[a-z0-9])?")re",
  };
  int counted = 0, checked = 0, shortcuts = 0;
  for (const std::string& regex : regexes) {
    auto automaton = vocab->cache().Automaton(regex, 100000, absl::InfiniteFuture());
    ASSERT_TRUE(automaton.ok()) << regex << ": " << automaton.status();
    const Dfa& dfa = (*automaton)->dfa;
    counted += dfa.counted ? 1 : 0;
    for (int32_t state : SomeStates(dfa, 30, rng)) {
      for (const TokenTrie* trie : {&vocab->short_trie(), &vocab->long_trie()}) {
        const std::vector<TrieNode>& nodes = trie->nodes();
        std::vector<uint32_t> want(words, 0);
        std::vector<int32_t> want_ends;
        int64_t live = 0;  // nodes live from `state`: what a walk without shortcuts visits at least
        // [depth] the state after the path's bytes, -1 dead: every node
        // visited, none skipped (Dfa::Next's own answer for each token).
        std::vector<int32_t> at(static_cast<size_t>(trie->max_depth()) + 1, -1);
        at[0] = state;
        for (int32_t i = 1; i < static_cast<int32_t>(nodes.size()); ++i) {
          const TrieNode& node = nodes[static_cast<size_t>(i)];
          const int32_t parent = at[node.depth - 1u];
          const int32_t s = parent < 0 ? -1 : dfa.Next(parent, node.byte);
          at[node.depth] = s;
          if (s < 0) continue;
          ++live;
          for (int k = 0; k < node.num_tokens; ++k) {
            const int32_t t = trie->token_ids()[node.token_begin + k];
            want[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
          }
          if (node.skip > i + 1 && dfa.Accepting(s)) want_ends.push_back(i);
        }
        const auto got = ComputeLexerMask({&dfa, state}, *trie, vocab->size());
        std::vector<uint32_t> got_words(words, 0);
        got->OrInto(got_words.data());
        EXPECT_EQ(got_words, want) << regex << " state " << state;
        EXPECT_EQ(got->end_nodes, want_ends) << regex << " state " << state;
        shortcuts += got->scanned < live ? 1 : 0;  // subtrees taken whole (TrieShortcut)
        ++checked;
      }
    }
  }
  EXPECT_GE(counted, 3);
  EXPECT_GT(checked, 200);
  EXPECT_GT(shortcuts, 20) << "the walks never took a subtree whole: that path is untested";
}

TEST(LexerMaskTest, EquivalentStatesAcrossAutomata) {
  auto compile = [](const std::string& re) {
    absl::StatusOr<Dfa> dfa = CompileRegex(re, 100000, absl::InfiniteFuture());
    EXPECT_TRUE(dfa.ok()) << re;
    return *std::move(dfa);
  };
  const Dfa any = compile("[a-z]*;"), long_run = compile("[a-z]{0,40};"), short_run = compile("[a-z]{0,3};");
  // 40 letters and ';' are told apart from any number only past 41 bytes.
  EXPECT_TRUE(EquivalentStates(any, any.start, long_run, long_run.start, 15, 1024));
  EXPECT_FALSE(EquivalentStates(any, any.start, long_run, long_run.start, 45, 1024));
  EXPECT_FALSE(EquivalentStates(any, any.start, short_run, short_run.start, 15, 1024));
  EXPECT_TRUE(EquivalentStates(any, any.start, short_run, short_run.start, 3, 1024));
  // Past the budget: false, never a guess.
  EXPECT_FALSE(EquivalentStates(any, any.start, long_run, long_run.start, 15, 2));
}

}  // namespace
}  // namespace tpserve::grammar::internal
