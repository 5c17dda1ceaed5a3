// Unit tests of the tokenizer on a tiny hand-written tokenizer.json (no network).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/tokenizer/toy_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace tpserve {
namespace {

using testing::ToyOptions;
using testing::ToyTokenizerJson;
using Ids = std::vector<int32_t>;

std::unique_ptr<Tokenizer> Toy(const ToyOptions& o = {}) {
  auto t = Tokenizer::FromJsonText(ToyTokenizerJson(o).dump(), "toy");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

Ids Bytes(std::string_view s) {
  Ids ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

TEST(ByteLevel, MapsBytesLikeGpt2) {
  EXPECT_EQ(byte_level::ByteToChar(' '), "\xC4\xA0");    // Ġ U+0120
  EXPECT_EQ(byte_level::ByteToChar('\n'), "\xC4\x8A");   // Ċ U+010A
  EXPECT_EQ(byte_level::ByteToChar(0xAD), "\xC5\x83");   // Ń U+0143: soft hyphen is the last remapped byte
  EXPECT_EQ(byte_level::ByteToChar('a'), "a");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byte_level::ByteToChar(static_cast<uint8_t>(b)), testing::ToyByteChar(b)) << b;
    const std::string one(1, static_cast<char>(b));
    EXPECT_EQ(byte_level::TokenToBytes(byte_level::BytesToToken(one)), one) << b;
  }
  EXPECT_EQ(byte_level::TokenToBytes("\xE4\xBD\xA0"), std::nullopt);  // 你 is not a byte character
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::Lossy("a\xF0\x9F\x98" "b"), "a\xEF\xBF\xBD" "b");         // truncated 4-byte: one U+FFFD
  EXPECT_EQ(utf8::Lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");            // overlong: two
  EXPECT_EQ(utf8::Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three
  EXPECT_EQ(utf8::Lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(utf8::StablePrefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::StablePrefix("ab\xF0\x41"), 4u);  // already invalid: nothing to wait for
  EXPECT_FALSE(utf8::IsValid("\xFF"));
  EXPECT_TRUE(utf8::IsValid("h\xC3\xA9llo \xF0\x9F\x98\x80"));
}

TEST(Bpe, MergeOrderFollowsRanks) {
  // "a b" ranked first: ab + c -> abc.  "b c" ranked first: a + bc, and no merge joins them.
  EXPECT_EQ(Toy()->Encode("abc", false), (Ids{testing::kAbc}));
  EXPECT_EQ(Toy({.bc_first = true})->Encode("abc", false), (Ids{'a', testing::kBc}));
  EXPECT_EQ(Toy({.merges_as_pairs = true})->Encode("abc", false), (Ids{testing::kAbc}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  EXPECT_EQ(Toy()->Encode("aaa", false), (Ids{testing::kAa, 'a'}));
  EXPECT_EQ(Toy()->Encode("aaaa", false), (Ids{testing::kAa, testing::kAa}));
}

TEST(Bpe, IgnoreMergesEmitsVocabWordsWhole) {
  EXPECT_EQ(Toy()->Encode("xyz", false), (Ids{'x', 'y', 'z'}));
  EXPECT_EQ(Toy({.ignore_merges = true})->Encode("xyz", false), (Ids{testing::kXyz}));
  EXPECT_EQ(Toy({.ignore_merges = true})->Encode("xyzz", false), (Ids{'x', 'y', 'z', 'z'}));
}

TEST(Tokenizer, PreTokenizerSplitsBeforeMerging) {
  // " t" merges only inside a pre-token: "a tab" -> "a", " tab" -> [" t", a, b]... ab merges after " t".
  EXPECT_EQ(Toy()->Encode("a tab", false), (Ids{'a', testing::kSpaceT, testing::kAb}));
  // Digits split in runs of at most three.
  EXPECT_EQ(Toy()->Encode("12345", false), Bytes("12345"));
}

TEST(Tokenizer, SplitsSpecialTokensOutOfText) {
  auto t = Toy();
  Ids want = Bytes("hi");
  want.push_back(testing::kBos);
  want.push_back(testing::kSpaceT);
  EXPECT_EQ(t->Encode("hi<|s|> t", false), want);
  // Near misses stay text.
  EXPECT_EQ(t->Encode("<|s|", false), Bytes("<|s|"));
  EXPECT_EQ(t->Encode("<|S|>", false), Bytes("<|S|>"));
  // Recognised with and without add_special_tokens; the template adds BOS only with.
  EXPECT_EQ(t->Encode("<think>", false), (Ids{testing::kThink}));
  EXPECT_EQ(t->Encode("<think>", true), (Ids{testing::kBos, testing::kThink}));
  EXPECT_EQ(t->Encode("", true), (Ids{testing::kBos}));
  EXPECT_EQ(t->Encode("", false), Ids{});
}

TEST(Tokenizer, SpecialTokensAsTextEncodeTheirBytes) {
  auto t = Toy();
  const SpecialTokensInText as_text = SpecialTokensInText::kAsText;
  // Disallowed: the special token's text goes through BPE like any other text.
  Ids want = Bytes("hi<|s|>");
  want.push_back(testing::kSpaceT);
  EXPECT_EQ(t->Encode("hi<|s|> t", false, as_text), want);
  EXPECT_EQ(t->Encode("<|e|>", false, as_text), Bytes("<|e|>"));
  Ids with_bos = {testing::kBos};  // add_special_tokens still adds the post-processor's BOS
  for (int32_t id : Bytes("<|s|>")) with_bos.push_back(id);
  EXPECT_EQ(t->Encode("<|s|>", true, as_text), with_bos);
  EXPECT_EQ(*t->Decode(t->Encode("a<|e|>b", false, as_text), false), "a<|e|>b");
  // Allowed (the default): the special id.
  EXPECT_EQ(t->Encode("<|e|>", false), (Ids{testing::kEnd}));
  EXPECT_EQ(t->Encode("<|e|>", false, SpecialTokensInText::kMatch), (Ids{testing::kEnd}));
  // Non-special added tokens are words of the vocabulary: they match either way.
  EXPECT_EQ(t->Encode("<think>", false, as_text), (Ids{testing::kThink}));
  EXPECT_EQ(t->Encode("x <R>  y", false, as_text), (Ids{'x', 0x20, testing::kR, 'y'}));
}

TEST(Tokenizer, NormalizedSpecialTokensAsText) {
  nlohmann::json j = ToyTokenizerJson({.nfc = true});
  j["added_tokens"][1]["normalized"] = true;  // <|e|>, matched after NFC
  auto t = Tokenizer::FromJsonText(j.dump(), "toy");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("a<|e|>", false), (Ids{'a', testing::kEnd}));
  EXPECT_EQ((*t)->Encode("a<|e|>", false, SpecialTokensInText::kAsText), Bytes("a<|e|>"));
}

TEST(Tokenizer, LstripRstripSingleWord) {
  auto t = Toy();
  // lstrip swallows the spaces on the left of <L>, rstrip those on the right of <R>.
  EXPECT_EQ(t->Encode("x  <L> y", false), (Ids{'x', testing::kL, 0x20, 'y'}));
  EXPECT_EQ(t->Encode("x <R>  y", false), (Ids{'x', 0x20, testing::kR, 'y'}));
  // single_word: only between non-word characters.
  EXPECT_EQ(t->Encode("x<W>", false), Bytes("x<W>"));
  EXPECT_EQ(t->Encode("<W>y", false), Bytes("<W>y"));
  EXPECT_EQ(t->Encode("x <W> y", false), (Ids{'x', 0x20, testing::kW, 0x20, 'y'}));
}

TEST(Tokenizer, NfcNormalizer) {
  auto t = Toy({.nfc = true});
  EXPECT_EQ(t->Encode("e\xCC\x81", false), Bytes("\xC3\xA9"));  // e + U+0301 -> é
  EXPECT_EQ(Toy()->Encode("e\xCC\x81", false), Bytes("e\xCC\x81"));
}

TEST(Tokenizer, RepairsIllFormedInput) {
  EXPECT_EQ(Toy()->Encode("a\xFF", false), Bytes("a\xEF\xBF\xBD"));
}

TEST(Tokenizer, DecodeSkipsSpecialTokensOnlyWhenAsked) {
  auto t = Toy();
  const Ids ids = t->Encode("<|s|>hi <think>abc<|e|>", true);
  EXPECT_EQ(*t->Decode(ids, false), "<|s|><|s|>hi <think>abc<|e|>");
  EXPECT_EQ(*t->Decode(ids, true), "hi <think>abc");
}

TEST(Tokenizer, DecodeRejectsInvalidIdsNamingThem) {
  auto t = Toy();
  for (int32_t bad : {-1, 306, 1000, 280}) {  // 264..299 are holes: no token has them
    auto r = t->Decode(Ids{'a', bad}, false);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(std::to_string(bad)), std::string::npos) << r.status();
  }
}

TEST(Tokenizer, DecodeIsLossyLikeHf) {
  auto t = Toy();
  // A lone emoji head, then text: one U+FFFD. Split emoji halves join back.
  EXPECT_EQ(*t->Decode(Ids{testing::kEmojiHead, 'a'}, false), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(*t->Decode(Ids{testing::kEmojiHead, testing::kEmojiTail}, false), "\xF0\x9F\x98\x80");
  // An added token ends a run of bytes: the halves around it do not join.
  EXPECT_EQ(*t->Decode(Ids{testing::kEmojiHead, testing::kThink, testing::kEmojiTail}, false),
            "\xEF\xBF\xBD<think>\xEF\xBF\xBD\xEF\xBF\xBD");
  // A skipped special token does not.
  EXPECT_EQ(*t->Decode(Ids{testing::kEmojiHead, testing::kEnd, testing::kEmojiTail}, true), "\xF0\x9F\x98\x80");
  EXPECT_EQ(t->Encode("\xF0\x9F\x98\x80", false), (Ids{testing::kEmojiHead, testing::kEmojiTail}));
}

TEST(Tokenizer, VocabQueries) {
  auto t = Toy();
  EXPECT_EQ(t->vocab_size(), 306);
  EXPECT_EQ(t->TokenToId("<|e|>"), testing::kEnd);
  EXPECT_EQ(t->TokenToId("\xC4\xA0t"), testing::kSpaceT);  // "Ġt"
  EXPECT_EQ(t->TokenToId("nope"), std::nullopt);
  EXPECT_TRUE(t->IsSpecial(testing::kBos));
  EXPECT_FALSE(t->IsSpecial(testing::kThink));
  EXPECT_FALSE(t->IsSpecial('a'));
  EXPECT_FALSE(t->IsSpecial(-5));
  EXPECT_FALSE(t->IsSpecial(100000));
}

TEST(Tokenizer, TokenBytesAreWhatEachIdDecodesToAlone) {
  auto t = Toy();
  EXPECT_EQ(t->TokenBytes('a'), "a");
  EXPECT_EQ(t->TokenBytes(testing::kSpaceT), " t");
  EXPECT_EQ(t->TokenBytes(testing::kEmojiHead), "\xF0\x9F");  // half a character: raw bytes, no U+FFFD
  EXPECT_EQ(t->TokenBytes(testing::kThink), "<think>");
  EXPECT_EQ(t->TokenBytes(testing::kEnd), "<|e|>");
  EXPECT_EQ(t->TokenBytes(-1), std::nullopt);
  EXPECT_EQ(t->TokenBytes(t->vocab_size()), std::nullopt);
  for (int32_t id = 0; id < t->vocab_size(); ++id) {  // ASCII pieces: what Decode gives
    const auto bytes = t->TokenBytes(id);
    if (bytes && std::all_of(bytes->begin(), bytes->end(), [](char c) { return (c & 0x80) == 0; })) {
      EXPECT_EQ(*t->Decode(std::vector<int32_t>{id}, false), *bytes) << id;
    }
  }
}

TEST(Tokenizer, RoundTripsArbitraryText) {
  auto t = Toy();
  for (std::string s : {"Hello, World!\r\n\tok", "  many   spaces  ", "\xE4\xBD\xA0\xE5\xA5\xBD\xF0\x9F\x91\x8D",
                        "it's THEY'RE 1234567", "<|s|x<|e|> <think> <W>"}) {
    EXPECT_EQ(*t->Decode(t->Encode(s, false), false), s);
  }
}

TEST(Tokenizer, HugeRunsOfOneClass) {
  // Deep regex backtracking (\s+(?!\S) over a long run) and a long BPE word.
  auto t = Toy();
  for (const std::string& s : {std::string(300000, ' ') + "x", std::string(200000, 'a'), std::string(100000, '\n') + "\t"}) {
    const Ids ids = t->Encode(s, false);
    EXPECT_LT(ids.size(), s.size() + 1);
    EXPECT_EQ(*t->Decode(ids, false), s);
  }
  EXPECT_EQ(t->Encode(std::string(6, 'a'), false), (Ids{testing::kAa, testing::kAa, testing::kAa}));
}

TEST(Tokenizer, EncodeIsThreadSafe) {
  auto t = Toy();
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("abc aaa" + std::to_string(i * 7919) + " tabc\n<think>" + std::string(i % 13, 'a'));
  std::vector<Ids> want;
  for (const auto& s : texts) want.push_back(Toy()->Encode(s, true));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int th = 0; th < 8; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * 31 + static_cast<size_t>(th) * 17 + static_cast<size_t>(rep)) % texts.size();
          if (t->Encode(texts[k], true) != want[k]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- broken files ----

absl::Status LoadError(const nlohmann::json& j) {
  auto t = Tokenizer::FromJsonText(j.dump(), "broken.json");
  return t.ok() ? absl::OkStatus() : t.status();
}

void ExpectMentions(const absl::Status& s, std::initializer_list<std::string_view> words) {
  ASSERT_FALSE(s.ok());
  for (auto w : words) EXPECT_NE(std::string(s.message()).find(w), std::string::npos) << "'" << w << "' not in: " << s;
}

TEST(TokenizerLoad, MissingFileNamesThePath) {
  auto t = Tokenizer::Load("/nonexistent/model-dir");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  ExpectMentions(t.status(), {"/nonexistent/model-dir"});
}

TEST(TokenizerLoad, FolderOrFile) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "toy_tokenizer_load";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << ToyTokenizerJson().dump();
  auto from_dir = Tokenizer::Load(dir);
  auto from_file = Tokenizer::Load(dir / "tokenizer.json");
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ((*from_dir)->Encode("abc", true), (Ids{testing::kBos, testing::kAbc}));
  std::ofstream(dir / "tokenizer.json") << "{\"model\": [1, 2";
  ExpectMentions(Tokenizer::Load(dir).status(), {"tokenizer.json", "invalid JSON"});
}

TEST(TokenizerLoad, UnsupportedComponentsNameTheField) {
  auto j = ToyTokenizerJson();
  j["model"]["type"] = "WordPiece";
  ExpectMentions(LoadError(j), {"broken.json", "model.type", "WordPiece"});
  j = ToyTokenizerJson();
  j["model"]["type"] = "Unigram";
  ExpectMentions(LoadError(j), {"model.type", "Unigram"});
  j = ToyTokenizerJson();
  j["normalizer"] = {{"type", "Lowercase"}};
  ExpectMentions(LoadError(j), {"normalizer.type", "Lowercase"});
  j = ToyTokenizerJson();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  ExpectMentions(LoadError(j), {"pre_tokenizer.type", "Metaspace"});
  j = ToyTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
  ExpectMentions(LoadError(j), {"pre_tokenizer.pretokenizers[0].pattern.Regex", "offset"});
  j = ToyTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  ExpectMentions(LoadError(j), {"pre_tokenizer.pretokenizers[0].behavior", "Sideways"});
  j = ToyTokenizerJson();
  j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0];  // no ByteLevel
  ExpectMentions(LoadError(j), {"pre_tokenizer", "ByteLevel"});
  j = ToyTokenizerJson();
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectMentions(LoadError(j), {"decoder.type", "WordPiece"});
  j = ToyTokenizerJson();
  j["post_processor"] = {{"type", "BertProcessing"}};
  ExpectMentions(LoadError(j), {"post_processor.type", "BertProcessing"});
  j = ToyTokenizerJson();
  j["model"]["byte_fallback"] = true;
  ExpectMentions(LoadError(j), {"model.byte_fallback"});
}

TEST(TokenizerLoad, BrokenModelFieldsNameTheField) {
  auto j = ToyTokenizerJson();
  j["model"]["merges"][3] = "a zz";
  ExpectMentions(LoadError(j), {"model.merges[3]", "zz"});
  j = ToyTokenizerJson();
  j["model"]["merges"][2] = "abc";
  ExpectMentions(LoadError(j), {"model.merges[2]"});
  j = ToyTokenizerJson();
  j["model"]["vocab"]["a"] = "one";
  ExpectMentions(LoadError(j), {"model.vocab"});
  j = ToyTokenizerJson();
  j.erase("model");
  ExpectMentions(LoadError(j), {"model", "missing"});
  j = ToyTokenizerJson();
  j["added_tokens"][1]["id"] = -3;
  ExpectMentions(LoadError(j), {"added_tokens[1].id"});
  j = ToyTokenizerJson();
  j["added_tokens"][0]["lstrip"] = "yes";  // wrong type somewhere deep: still an error, not a crash
  EXPECT_FALSE(LoadError(j).ok());
  j = ToyTokenizerJson();
  j["post_processor"]["processors"][1]["single"][0]["SpecialToken"]["id"] = "<|nope|>";
  j["post_processor"]["processors"][1]["special_tokens"] = nlohmann::json::object();
  ExpectMentions(LoadError(j), {"post_processor.processors[1].single[0]", "<|nope|>"});
  EXPECT_FALSE(Tokenizer::FromJsonText("[]", "x").ok());
  EXPECT_FALSE(Tokenizer::FromJsonText("", "x").ok());
}

}  // namespace
}  // namespace tpserve
