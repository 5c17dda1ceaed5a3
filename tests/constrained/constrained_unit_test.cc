// constrained/: tool-call grammars accept exactly valid calls in each model
// format; a sequence's constraint lets the reasoning through free and
// constrains the answer after it; replay reaches the same state; the
// compiler caches by key and refuses what the engine refuses.
#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "constrained/constraint_compiler.h"
#include "constrained/sequence_constraint.h"
#include "constrained/tool_call_grammar.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sampling/token_mask.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

using K = OutputConstraint::Kind;

// Ids 0..255 are the bytes; then <think>, </think> (special: the grammar never
// allows them itself) and the stop id.
constexpr int32_t kThink = 256, kEndThink = 257, kStop = 258;

std::shared_ptr<const grammar::Vocabulary> ByteVocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back("<think>");
  bytes.push_back("</think>");
  bytes.push_back("");
  std::vector<bool> special(bytes.size(), false);
  special[kThink] = special[kEndThink] = special[kStop] = true;
  return *grammar::Vocabulary::Create(bytes, {kStop}, special);
}

class ConstrainedTest : public ::testing::Test {
 protected:
  ConstrainedTest() : vocab_(ByteVocabulary()), compiler_([this] { return vocab_; }) {}

  std::unique_ptr<SequenceConstraint> Make(const OutputConstraint& c) {
    auto g = compiler_.Compile(c);
    EXPECT_TRUE(g.ok()) << g.status();
    auto s = SequenceConstraint::Create(*g, vocab_, c);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  // Whether `s` allows each token of `ids` in turn (its mask, then Accept).
  static bool Feed(SequenceConstraint& s, const std::vector<int32_t>& ids) {
    std::vector<uint32_t> words(grammar::MaskWords(kStop + 1));
    for (int32_t t : ids) {
      if (s.FillMask(words) && !((words[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u)) return false;
      if (!s.Accept(t)) return false;
    }
    return true;
  }
  static std::vector<int32_t> Bytes(const std::string& text) {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  bool Accepts(const OutputConstraint& c, const std::string& text, bool then_stop = true) {
    std::unique_ptr<SequenceConstraint> s = Make(c);
    std::vector<int32_t> ids = Bytes(text);
    if (then_stop) ids.push_back(kStop);
    return Feed(*s, ids);
  }

  std::shared_ptr<const grammar::Vocabulary> vocab_;
  ConstraintCompiler compiler_;
};

OutputConstraint WeatherTools(OutputConstraint::ToolFormat format, bool parallel) {
  const nlohmann::json params = {{"type", "object"},
                                 {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
                                 {"required", {"city"}},
                                 {"additionalProperties", false}};
  return OutputConstraint{.kind = K::kToolCalls, .tool_format = format,
                          .functions = {{"get_weather", params.dump()}, {"ping", ""}}, .parallel_tool_calls = parallel};
}

TEST_F(ConstrainedTest, HermesCallsAreExactlyValidCalls) {
  const OutputConstraint one = WeatherTools(OutputConstraint::ToolFormat::kHermes, false);
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"days\":3}}\n</tool_call>";
  EXPECT_TRUE(Accepts(one, call));
  EXPECT_TRUE(Accepts(one, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"any\":[1]}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(one, call + "\n" + call));  // one call only
  EXPECT_FALSE(Accepts(one, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\":3}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(one, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(one, "Sure! " + call));
  const OutputConstraint many = WeatherTools(OutputConstraint::ToolFormat::kHermes, true);
  EXPECT_TRUE(Accepts(many, call + "\n" + call));
  EXPECT_FALSE(Accepts(many, call + "\n", /*then_stop=*/true));
}

TEST_F(ConstrainedTest, Llama3CallsAreExactlyValidCalls) {
  const OutputConstraint c = WeatherTools(OutputConstraint::ToolFormat::kLlama3Json, true);
  const std::string call = "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Rome\"}}";
  EXPECT_TRUE(Accepts(c, call));
  EXPECT_TRUE(Accepts(c, call + "; " + call));
  EXPECT_FALSE(Accepts(c, "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}"));
}

TEST_F(ConstrainedTest, ABadParametersSchemaNamesTheTool) {
  OutputConstraint c = WeatherTools(OutputConstraint::ToolFormat::kHermes, true);
  c.functions[0].parameters_json = R"({"type": "string", "not": {}})";
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> g = compiler_.Compile(c);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(g.status()));
  EXPECT_NE(g.status().message().find("tools[get_weather].parameters"), std::string::npos) << g.status();
}

TEST_F(ConstrainedTest, ReasoningIsFreeAndTheAnswerConstrained) {
  OutputConstraint c{.kind = K::kRegex, .text = "(yes|no)", .think_start = kThink, .think_end = kEndThink};
  // No reasoning: the answer from the first token.
  EXPECT_TRUE(Accepts(c, "yes"));
  EXPECT_FALSE(Accepts(c, "maybe"));
  // Reasoning opened by the model: anything until </think>, then the answer.
  std::unique_ptr<SequenceConstraint> s = Make(c);
  std::vector<int32_t> ids = {kThink};
  for (int32_t t : Bytes("hmm, maybe? {[")) ids.push_back(t);
  ids.push_back(kEndThink);
  for (int32_t t : Bytes("no")) ids.push_back(t);
  ids.push_back(kStop);
  EXPECT_TRUE(Feed(*s, ids));
  // The answer after the reasoning is held to the grammar.
  s = Make(c);
  EXPECT_FALSE(Feed(*s, {kThink, 'x', kEndThink, 'x'}));
  // A prompt that opened the reasoning: free from the start.
  c.starts_in_reasoning = true;
  s = Make(c);
  EXPECT_TRUE(Feed(*s, {'<', 'x', kEndThink, 'y', 'e', 's', kStop}));
  // <think> only as the first token.
  c.starts_in_reasoning = false;
  s = Make(c);
  EXPECT_FALSE(Feed(*s, {'y', kThink}));
}

TEST_F(ConstrainedTest, TerminatedAllowsOnlyStop) {
  std::unique_ptr<SequenceConstraint> s = Make(OutputConstraint{.kind = K::kChoice, .choices = {"ab"}});
  EXPECT_TRUE(Feed(*s, Bytes("ab")));
  EXPECT_TRUE(s->terminated());
  std::vector<uint32_t> words(grammar::MaskWords(kStop + 1));
  ASSERT_TRUE(s->FillMask(words));
  for (int32_t t = 0; t <= kStop; ++t) {
    EXPECT_EQ((words[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u, t == kStop ? 1u : 0u) << t;
  }
}

TEST_F(ConstrainedTest, ReplayReachesTheSameState) {
  const OutputConstraint c{.kind = K::kJsonSchema, .text = R"({"type":"array","items":{"type":"integer"}})"};
  const std::vector<int32_t> prefix = Bytes("[12,3");
  auto g = compiler_.Compile(c);
  ASSERT_TRUE(g.ok());
  auto replayed = SequenceConstraint::Create(*g, vocab_, c, prefix);
  ASSERT_TRUE(replayed.ok());
  std::unique_ptr<SequenceConstraint> fed = Make(c);
  ASSERT_TRUE(Feed(*fed, prefix));
  std::vector<uint32_t> a(grammar::MaskWords(kStop + 1)), b(a.size());
  (*replayed)->FillMask(a);
  fed->FillMask(b);
  EXPECT_EQ(a, b);
  // Output the grammar refuses cannot be replayed.
  auto bad = SequenceConstraint::Create(*g, vocab_, c, Bytes("[x"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("output token 1"), std::string::npos) << bad.status();
}

TEST_F(ConstrainedTest, CompilerCachesByKey) {
  const OutputConstraint a{.kind = K::kRegex, .text = "a+"};
  OutputConstraint b = a;
  b.think_start = kThink, b.think_end = kEndThink;  // the same grammar
  ASSERT_TRUE(compiler_.Compile(a).ok());
  ASSERT_TRUE(compiler_.Compile(b).ok());
  EXPECT_EQ(compiler_.misses(), 1);
  EXPECT_EQ(compiler_.hits(), 1);
  EXPECT_NE(ConstraintKey(a), ConstraintKey(OutputConstraint{.kind = K::kEbnf, .text = "a+"}));
  EXPECT_NE(ConstraintKey(WeatherTools(OutputConstraint::ToolFormat::kHermes, true)),
            ConstraintKey(WeatherTools(OutputConstraint::ToolFormat::kHermes, false)));
  EXPECT_FALSE(compiler_.Compile(OutputConstraint{.kind = K::kRegex, .text = "(a"}).ok());
}

// ApplyTokenMask (word by word) against its definition, bit by bit: odd
// vocabularies, all-0 / all-1 / mixed words, a mask shorter than the row.
TEST(TokenMask, ApplyTokenMaskIsItsDefinition) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  for (int32_t vocab : {1, 31, 32, 33, 95, 257, 1000}) {
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<uint32_t> words(static_cast<size_t>(TokenMaskWords(vocab)));
      for (uint32_t& w : words) {
        const int pick = kind == 3 ? static_cast<int>(rng() % 3) : kind;
        w = pick == 0 ? 0u : pick == 1 ? ~0u : static_cast<uint32_t>(rng());
      }
      if (kind == 2 && words.size() > 1) words.pop_back();  // ids past the mask are masked
      std::vector<float> row(static_cast<size_t>(vocab)), want;
      for (float& x : row) x = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 100.0f;
      want = row;
      for (int32_t t = 0; t < vocab; ++t) {
        const size_t w = static_cast<size_t>(t / 32);
        if (w >= words.size() || ((words[w] >> (t % 32)) & 1u) == 0) want[static_cast<size_t>(t)] = -INFINITY;
      }
      ApplyTokenMask(words, row);
      EXPECT_EQ(row, want) << "V=" << vocab << " kind " << kind << " seed " << seed;
    }
  }
}

// NextAllowedToken (the simulated step's pick) against a bit-by-bit scan:
// odd vocabularies, sparse and empty masks, every starting id.
TEST(TokenMask, NextAllowedTokenIsTheFirstAllowedCyclically) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  for (int32_t vocab : {1, 31, 32, 33, 95, 257}) {
    for (int density : {0, 1, 8, 64}) {  // allowed ids per 64
      std::vector<uint32_t> words(static_cast<size_t>(TokenMaskWords(vocab)), 0);
      for (int32_t t = 0; t < vocab; ++t) {
        if (static_cast<int>(rng() % 64) < density) words[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
      }
      if (vocab % 32 != 0) words.back() |= ~0u << (vocab % 32);  // set bits past the vocabulary never count
      for (int32_t from = 0; from < vocab; ++from) {
        int32_t want = -1;
        for (int32_t k = 0; k < vocab && want < 0; ++k) {
          const int32_t t = (from + k) % vocab;
          if ((words[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) want = t;
        }
        ASSERT_EQ(NextAllowedToken(words, from, vocab), want)
            << "V=" << vocab << " density " << density << " from " << from << " seed " << seed;
      }
    }
  }
}

// SoleAllowedToken (jump-forward's test of a mask) against a bit-by-bit
// count: masks with none, one, two and many allowed ids, bits past the
// vocabulary set (they never count).
TEST(TokenMask, SoleAllowedTokenIsTheOnlySetBit) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  for (int32_t vocab : {1, 31, 32, 33, 95, 257, 4099}) {
    for (int allowed : {0, 1, 1, 1, 2, 5}) {
      std::vector<uint32_t> words(static_cast<size_t>(TokenMaskWords(vocab)), 0);
      for (int k = 0; k < allowed; ++k) {
        const auto t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
        words[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
      }
      if (vocab % 32 != 0) words.back() |= ~0u << (vocab % 32);
      int32_t want = -1, count = 0;
      for (int32_t t = 0; t < vocab; ++t) {
        if ((words[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) {
          want = t;
          ++count;
        }
      }
      EXPECT_EQ(SoleAllowedToken(words, vocab), count == 1 ? want : -1)
          << "V=" << vocab << " allowed " << allowed << " seed " << seed;
    }
  }
}

// The range versions of NextAllowedToken and SoleAllowedToken (what the
// step runner calls with the words its mask spans) give what the whole-mask
// versions give when every bit outside [lo, hi) is clear, and read nothing
// outside: with those words then filled with set bits they answer the same.
TEST(TokenMask, RangeVersionsReadOnlyTheRange) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  for (int32_t vocab : {1, 31, 33, 95, 257, 4099}) {
    const int64_t n = TokenMaskWords(vocab);
    for (int trial = 0; trial < 12; ++trial) {
      const auto lo = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      const int64_t hi = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - lo + 1));
      const int density = std::array{0, 1, 8, 64}[trial % 4];  // allowed ids per 64, inside the range
      std::vector<uint32_t> words(static_cast<size_t>(n), 0);
      for (int32_t t = static_cast<int32_t>(lo * 32); t < std::min<int64_t>(hi * 32, vocab); ++t) {
        if (static_cast<int>(rng() % 64) < density) words[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
      }
      if (trial % 4 == 1 && hi > lo) {  // one allowed id alone: a forced mask
        std::fill(words.begin(), words.end(), 0u);
        const int32_t t = static_cast<int32_t>(lo * 32 + static_cast<int64_t>(rng() % 32));
        if (t < vocab) words[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
      }
      std::vector<uint32_t> dirty = words;  // the same mask, garbage outside the range
      for (int64_t w = 0; w < n; ++w) {
        if (w < lo || w >= hi) dirty[static_cast<size_t>(w)] = static_cast<uint32_t>(rng()) | 1u;
      }
      EXPECT_EQ(SoleAllowedToken(dirty, vocab, lo, hi), SoleAllowedToken(words, vocab))
          << "V=" << vocab << " [" << lo << ", " << hi << ") seed " << seed;
      for (int32_t from = 0; from < vocab; from += 1 + static_cast<int32_t>(rng() % 7)) {
        ASSERT_EQ(NextAllowedToken(dirty, from, vocab, lo, hi), NextAllowedToken(words, from, vocab))
            << "V=" << vocab << " [" << lo << ", " << hi << ") from " << from << " seed " << seed;
      }
    }
  }
}

// CopyMaskedRow (the host sampler's masked row, one pass, the logits outside
// the mask's words not read) against ApplyTokenMask on a copy: odd
// vocabularies, ranges anywhere, set bits outside the range (never read),
// a mask shorter than the row.
TEST(TokenMask, CopyMaskedRowIsApplyTokenMaskOnACopy) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<float> got;
  for (int32_t vocab : {1, 31, 33, 95, 257, 4099}) {
    const int64_t n = TokenMaskWords(vocab);
    for (int trial = 0; trial < 16; ++trial) {
      const auto lo = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      const int64_t hi = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - lo + 1));
      std::vector<uint32_t> words(static_cast<size_t>(n), 0);
      for (int64_t w = lo; w < hi; ++w) {
        const int pick = static_cast<int>(rng() % 3);
        words[static_cast<size_t>(w)] = pick == 0 ? 0u : pick == 1 ? ~0u : static_cast<uint32_t>(rng());
      }
      if (trial % 5 == 4 && words.size() > 1) words.pop_back();  // ids past the mask are masked
      std::vector<uint32_t> dirty = words;
      for (int64_t w = 0; w < std::ssize(dirty); ++w) {
        if (w < lo || w >= hi) dirty[static_cast<size_t>(w)] = static_cast<uint32_t>(rng()) | 1u;
      }
      std::vector<float> row(static_cast<size_t>(vocab));
      for (float& x : row) x = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 100.0f;
      std::vector<float> want = row;
      ApplyTokenMask(words, want);
      CopyMaskedRow(dirty, lo, hi, row, got);
      ASSERT_EQ(got, want) << "V=" << vocab << " [" << lo << ", " << hi << ") seed " << seed;
    }
  }
}

// A vocabulary laid out as real ones are: the bytes, a few hundred longer
// tokens, the think tokens, then ids with no token up to 9,000 (a model's
// padded LM head) and the stop id last, far from the rest.
std::shared_ptr<const grammar::Vocabulary> PaddedVocabulary(int32_t& think, int32_t& end_think) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "\":", "\",\"", "\"}", "true", "false", "null", "[{", "}]", "},{", "\"name", "age",
                        "ab", "abc", "12", "345", ", ", "\\\"", "yes", "no"}) {
    tokens.push_back(t);
  }
  for (int k = 0; k < 300; ++k) tokens.push_back(std::string(1, static_cast<char>('a' + k % 26)) + std::to_string(k));
  think = static_cast<int32_t>(tokens.size());
  tokens.push_back("<think>");
  end_think = think + 1;
  tokens.push_back("</think>");
  tokens.resize(9000);
  std::vector<bool> special(tokens.size(), false);
  special[static_cast<size_t>(think)] = special[static_cast<size_t>(end_think)] = special[8999] = true;
  return *grammar::Vocabulary::Create(tokens, {8999}, special);
}

// SequenceConstraint::FillMask(words, range) into one buffer that masks of
// other sequences dirtied (the step runner's rows) gives, at every token, the
// bits of FillMask into a fresh buffer, and every set bit lies in the range
// it returns. Sequences walk random allowed tokens to their stop id.
TEST(MaskRange, ReusedBufferGivesTheWholeMask) {
  const uint64_t seed = testing_util::TestSeed();
  std::mt19937_64 rng(seed);
  int32_t think = 0, end_think = 0;
  const std::shared_ptr<const grammar::Vocabulary> vocab = PaddedVocabulary(think, end_think);
  ConstraintCompiler compiler([&] { return vocab; });
  const std::vector<OutputConstraint> cs = {
      {.kind = K::kJsonSchema, .text = R"({"type":"array","minItems":2,"items":{"type":"object","properties":)"
                                       R"({"name":{"type":"string","maxLength":6},"age":{"type":"integer"}},)"
                                       R"("required":["name","age"],"additionalProperties":false}})"},
      {.kind = K::kRegex, .text = "(yes|no|[a-c]{1,4}[0-9]+)", .think_start = think, .think_end = end_think},
      {.kind = K::kJsonObject},
      {.kind = K::kChoice, .choices = {"true", "false", "null"}}};
  const size_t n = grammar::MaskWords(vocab->size());
  std::vector<uint32_t> shared(n, 0u), fresh(n);
  grammar::MaskRange dirty;  // of `shared`, by whichever sequence filled it last
  int64_t masks = 0, narrow = 0;
  for (int round = 0; round < 8; ++round) {
    std::vector<std::unique_ptr<SequenceConstraint>> seqs;
    for (const OutputConstraint& c : cs) {
      auto g = compiler.Compile(c);
      ASSERT_TRUE(g.ok()) << g.status();
      seqs.push_back(*SequenceConstraint::Create(*g, vocab, c));
    }
    std::vector<bool> done(seqs.size(), false);
    for (int step = 0; step < 120; ++step) {
      for (size_t i = 0; i < seqs.size(); ++i) {
        if (done[i]) continue;
        grammar::MaskRange range = dirty;
        const bool masked = seqs[i]->FillMask(shared, range);
        std::fill(fresh.begin(), fresh.end(), 0xA5A5A5A5u);
        ASSERT_EQ(seqs[i]->FillMask(fresh), masked);
        std::vector<int32_t> allowed;
        if (masked) {
          dirty = range;
          ++masks;
          narrow += range.end - range.begin < n / 4 ? 1 : 0;
          ASSERT_EQ(shared, fresh) << "sequence " << i << " step " << step << " seed " << seed;
          for (size_t w = 0; w < n; ++w) {
            if (w < range.begin || w >= range.end) {
              ASSERT_EQ(shared[w], 0u) << "word " << w << " seed " << seed;
            }
          }
          for (int32_t t = 0; t < vocab->size(); ++t) {
            if ((shared[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) allowed.push_back(t);
          }
        } else {  // reasoning: anything, its end more often
          allowed = {'x', ' ', end_think, end_think};
        }
        ASSERT_FALSE(allowed.empty()) << "sequence " << i << " step " << step << " seed " << seed;
        // The stop id only now and then, so that outputs grow past it.
        int32_t t = allowed[rng() % allowed.size()];
        if (t == 8999 && allowed.size() > 1 && rng() % 4 != 0) t = allowed[rng() % (allowed.size() - 1)];
        ASSERT_TRUE(seqs[i]->Accept(t)) << "token " << t << " seed " << seed;
        done[i] = t == 8999;
      }
    }
  }
  // Most masks span a few words of the 282: the point of the range.
  EXPECT_GT(narrow, masks / 2) << narrow << " of " << masks << " seed " << seed;
}

}  // namespace
}  // namespace tpserve
