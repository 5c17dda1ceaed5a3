// The incremental detokenizer against Decode on seeded random id sequences.
#include "tokenizer/detokenizer.h"

#include <random>

#include <gtest/gtest.h>

#include "tests/testing/seed.h"
#include "tests/tokenizer/toy_tokenizer.h"
#include "tokenizer/utf8.h"

namespace tpserve {
namespace {

using Ids = std::vector<int32_t>;

std::unique_ptr<Tokenizer> Toy() {
  auto t = Tokenizer::FromJsonText(testing::ToyTokenizerJson().dump(), "toy");
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

// Streams `ids`; checks every piece is valid UTF-8; returns the concatenation.
std::string Stream(const Tokenizer& t, const Ids& ids, bool skip, std::vector<std::string>* pieces = nullptr) {
  IncrementalDetokenizer detok(t, skip);
  std::string all;
  for (size_t i = 0; i <= ids.size(); ++i) {
    const std::string piece = i < ids.size() ? detok.Add(ids[i]) : detok.Finish();
    EXPECT_TRUE(utf8::IsValid(piece)) << "piece " << i << " breaks UTF-8";
    if (pieces != nullptr) pieces->push_back(piece);
    all += piece;
  }
  return all;
}

TEST(IncrementalDetokenizer, HoldsBackSplitEmoji) {
  auto t = Toy();
  std::vector<std::string> pieces;
  // 😀 = F0 9F 98 80 as four single-byte tokens, then 'a'.
  EXPECT_EQ(Stream(*t, Ids{0xF0, 0x9F, 0x98, 0x80, 'a'}, false, &pieces), "\xF0\x9F\x98\x80" "a");
  EXPECT_EQ(pieces, (std::vector<std::string>{"", "", "", "\xF0\x9F\x98\x80", "a", ""}));
  pieces.clear();
  EXPECT_EQ(Stream(*t, Ids{testing::kEmojiHead, testing::kEmojiTail}, false, &pieces), "\xF0\x9F\x98\x80");
  EXPECT_EQ(pieces, (std::vector<std::string>{"", "\xF0\x9F\x98\x80", ""}));
  // An unfinished sequence comes out at Finish, as U+FFFD like Decode.
  pieces.clear();
  EXPECT_EQ(Stream(*t, Ids{'x', 0xE2, 0x82}, false, &pieces), "x\xEF\xBF\xBD");
  EXPECT_EQ(pieces.back(), "\xEF\xBF\xBD");
}

TEST(IncrementalDetokenizer, IgnoresIdsDecodeRejects) {
  auto t = Toy();
  IncrementalDetokenizer detok(*t, false);
  EXPECT_EQ(detok.Add(-1), "");
  EXPECT_EQ(detok.Add(5000), "");
  EXPECT_EQ(detok.Add('o'), "o");
  EXPECT_EQ(detok.Finish(), "");
}

TEST(IncrementalDetokenizer, MatchesDecodeOnRandomSequences) {
  auto t = Toy();
  // Ids biased towards pieces of multi-byte characters so sequences split and break them.
  std::vector<int32_t> pool;
  for (int b = 0; b < 256; ++b) pool.push_back(b);
  for (int b : {0xF0, 0x9F, 0x98, 0x80, 0xE4, 0xBD, 0xA0, 0xC3, 0xA9, 0xED, 0xA0, 0xF4, 0x90}) {
    for (int k = 0; k < 8; ++k) pool.push_back(b);
  }
  for (int k = 0; k < 16; ++k) {
    for (int32_t id : {testing::kEmojiHead, testing::kEmojiTail, testing::kAbc, testing::kSpaceT, testing::kBos,
                       testing::kEnd, testing::kThink}) {
      pool.push_back(id);
    }
  }
  const unsigned seed = testing_util::TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t len = std::uniform_int_distribution<size_t>(0, 37)(rng);
    Ids ids(len);
    for (auto& id : ids) id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    for (bool skip : {false, true}) {
      auto want = t->Decode(ids, skip);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(Stream(*t, ids, skip), *want) << "trial " << trial << " skip " << skip;
    }
  }
}

}  // namespace
}  // namespace tpserve
