// A tiny hand-written byte-level BPE tokenizer.json for tests that must not need
// the network: the 256 byte tokens (ids 0..255 in byte order), a few merges, and
// added tokens exercising special / lstrip / rstrip / single_word.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpserve::testing {

// The GPT-2 byte-level spelling of byte `b`, written out independently of the
// library: printable Latin-1 maps to itself, the rest to U+0100.. in order.
inline std::string ToyByteChar(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      const bool p = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
      if (!p) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

inline std::string ToySpell(const std::string& bytes) {
  std::string s;
  for (unsigned char c : bytes) s += ToyByteChar(c);
  return s;
}

// Ids of the toy vocabulary beyond the 256 bytes.
enum ToyId : int32_t {
  kAb = 256,      // "ab"
  kBc = 257,      // "bc"
  kAbc = 258,     // "abc"
  kAa = 259,      // "aa"
  kXyz = 260,     // "xyz": in the vocab, but no merge builds it (tests ignore_merges)
  kSpaceT = 261,  // " t"
  kEmojiHead = 262,  // "\xF0\x9F" (first half of U+1F600 😀)
  kEmojiTail = 263,  // "\x98\x80"
  kBos = 300,     // "<|s|>"  special, added by the post-processor
  kEnd = 301,     // "<|e|>"  special
  kL = 302,       // "<L>"    lstrip
  kR = 303,       // "<R>"    rstrip
  kW = 304,       // "<W>"    single_word
  kThink = 305,   // "<think>" added, not special
};

struct ToyOptions {
  bool ignore_merges = false;
  bool bc_first = false;  // rank "b c" before "a b"
  bool nfc = false;
  bool merges_as_pairs = false;
};

inline nlohmann::json ToyTokenizerJson(const ToyOptions& o = {}) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ToyByteChar(b)] = b;
  vocab["ab"] = kAb;
  vocab["bc"] = kBc;
  vocab["abc"] = kAbc;
  vocab["aa"] = kAa;
  vocab["xyz"] = kXyz;
  vocab[ToySpell(" t")] = kSpaceT;
  vocab[ToySpell("\xF0\x9F")] = kEmojiHead;
  vocab[ToySpell("\x98\x80")] = kEmojiTail;
  std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "a"},
                                                             {ToySpell(" "), "t"},
                                                             {ToySpell("\xF0"), ToySpell("\x9F")},
                                                             {ToySpell("\x98"), ToySpell("\x80")}};
  if (o.bc_first) std::swap(merges[0], merges[1]);
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [l, r] : merges) {
    if (o.merges_as_pairs) {
      merge_list.push_back({l, r});
    } else {
      merge_list.push_back(l + " " + r);
    }
  }
  auto added = [](int id, const char* content, bool special, bool lstrip, bool rstrip, bool single_word) {
    return nlohmann::json{{"id", id},         {"content", content}, {"single_word", single_word}, {"lstrip", lstrip},
                          {"rstrip", rstrip}, {"normalized", false}, {"special", special}};
  };
  const char* pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return nlohmann::json{
      {"version", "1.0"},
      {"added_tokens",
       {added(kBos, "<|s|>", true, false, false, false), added(kEnd, "<|e|>", true, false, false, false),
        added(kL, "<L>", false, true, false, false), added(kR, "<R>", false, false, true, false),
        added(kW, "<W>", false, false, false, true), added(kThink, "<think>", false, false, false, false)}},
      {"normalizer", o.nfc ? nlohmann::json{{"type", "NFC"}} : nlohmann::json(nullptr)},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "Sequence"},
        {"processors",
         {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
          {{"type", "TemplateProcessing"},
           {"single", {{{"SpecialToken", {{"id", "<|s|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
           {"pair", nlohmann::json::array()},
           {"special_tokens", {{"<|s|>", {{"id", "<|s|>"}, {"ids", {kBos}}, {"tokens", {"<|s|>"}}}}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", o.ignore_merges},
        {"vocab", vocab},
        {"merges", merge_list}}}};
}

}  // namespace tpserve::testing
