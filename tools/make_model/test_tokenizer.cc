// Writes or copies the tokenizer files of a generated model. See test_tokenizer.h.
#include "tools/make_model/test_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tools/make_model/corpus.h"

namespace tpserve::make_model {
namespace {

using OJson = nlohmann::ordered_json;

// The pre-tokenizer regexes of the real tokenizers (tokenizer.json "Split" patterns).
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwenRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The published Llama 3 Instruct chat template, and ChatML as Qwen renders it
// (tokenizer/chat_template.h renders exactly these).
constexpr std::string_view kLlama3ChatTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
constexpr std::string_view kChatMLTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

std::vector<std::string> SpecialTokens(TokenizerFamily family) {
  if (family == TokenizerFamily::kLlama3) {
    return {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  }
  return {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
}

// GPT-2's byte -> printable unicode code point map, as UTF-8 strings.
std::vector<std::string> ByteSymbols() {
  std::vector<int> cp(256, -1);
  for (int b = 0; b < 256; ++b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) cp[b] = b;
  }
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (cp[b] < 0) cp[b] = 256 + n++;
  }
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) {
    const int c = cp[b];
    std::string s;
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {  // all code points here are < 0x800: two bytes
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
    out[b] = s;
  }
  return out;
}

bool IsLetter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsSpace(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// An ASCII approximation of the families' pre-tokenizer, good enough to count
// words for training: " word", "word", digits, " punctuation", whitespace runs.
std::vector<std::string> PreTokenize(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    const auto c = static_cast<unsigned char>(text[i]);
    const bool lead_space = c == ' ' && i + 1 < text.size() && !IsSpace(static_cast<unsigned char>(text[i + 1]));
    if (lead_space) ++j;
    const auto d = static_cast<unsigned char>(text[j]);
    if (IsLetter(d)) {
      while (j < text.size() && IsLetter(static_cast<unsigned char>(text[j]))) ++j;
    } else if (IsDigit(d) && !lead_space) {
      ++j;
    } else if (!IsSpace(d)) {
      while (j < text.size() && !IsSpace(static_cast<unsigned char>(text[j])) &&
             !IsLetter(static_cast<unsigned char>(text[j])) && !IsDigit(static_cast<unsigned char>(text[j]))) {
        ++j;
      }
    } else {
      while (j < text.size() && IsSpace(static_cast<unsigned char>(text[j]))) ++j;
    }
    if (j == i) ++j;
    out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

struct Bpe {
  std::vector<std::string> vocab;                          // id -> token (byte-level symbols)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

// Learns up to `max_merges` merges from kTrainingText: repeatedly merge the most
// frequent adjacent pair (ties broken by the pair's spelling, so it is deterministic)
// until no pair occurs twice.
Bpe Train(int64_t max_merges) {
  const std::vector<std::string> bytes = ByteSymbols();
  Bpe bpe;
  bpe.vocab = bytes;
  std::map<std::string, int64_t> counts;
  for (const std::string& w : PreTokenize(kTrainingText)) ++counts[w];
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, n] : counts) {
    std::vector<std::string> symbols;
    for (unsigned char c : w) symbols.push_back(bytes[c]);
    words.emplace_back(std::move(symbols), n);
  }
  std::map<std::string, int64_t> ids;
  for (size_t i = 0; i < bpe.vocab.size(); ++i) ids[bpe.vocab[i]] = static_cast<int64_t>(i);

  while (static_cast<int64_t>(bpe.merges.size()) < max_merges) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [symbols, n] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += n;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int64_t best_count = 1;
    for (const auto& [pair, n] : pairs) {
      if (n > best_count) {
        best = &pair;
        best_count = n;
      }
    }
    if (best == nullptr) break;
    const std::pair<std::string, std::string> merge = *best;
    const std::string joined = merge.first + merge.second;
    bpe.merges.push_back(merge);
    if (ids.emplace(joined, static_cast<int64_t>(bpe.vocab.size())).second) bpe.vocab.push_back(joined);
    for (auto& [symbols, n] : words) {
      std::vector<std::string> next;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == merge.first && symbols[i + 1] == merge.second) {
          next.push_back(joined);
          ++i;
        } else {
          next.push_back(symbols[i]);
        }
      }
      symbols = std::move(next);
    }
  }
  return bpe;
}

absl::Status WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string(), "; check that the folder is writable"));
  return absl::OkStatus();
}

OJson AddedToken(int64_t id, const std::string& content) {
  return OJson{{"id", id},           {"content", content}, {"single_word", false}, {"lstrip", false},
               {"rstrip", false},    {"normalized", false}, {"special", true}};
}

OJson ByteLevel(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return OJson{{"type", "ByteLevel"},
               {"add_prefix_space", add_prefix_space},
               {"trim_offsets", trim_offsets},
               {"use_regex", use_regex}};
}

TokenizerInfo InfoFor(TokenizerFamily family, const std::map<std::string, int64_t>& special, int64_t size) {
  TokenizerInfo info;
  info.size = size;
  if (family == TokenizerFamily::kLlama3) {
    info.bos_id = special.at("<|begin_of_text|>");
    info.config_eos = {special.at("<|end_of_text|>")};
    info.generation_eos = {special.at("<|end_of_text|>"), special.at("<|eot_id|>")};
  } else {
    info.bos_id = special.at("<|endoftext|>");
    info.config_eos = {special.at("<|im_end|>")};
    info.generation_eos = {special.at("<|im_end|>"), special.at("<|endoftext|>")};
  }
  return info;
}

// tokenizer.json's post_processor: Llama 3 prepends <|begin_of_text|> (id bot_id).
OJson PostProcessor(bool llama, int64_t bot_id) {
  if (!llama) return ByteLevel(false, false, false);
  const std::string bot = "<|begin_of_text|>";
  const OJson bot_piece = {{"SpecialToken", {{"id", bot}, {"type_id", 0}}}};
  return {{"type", "Sequence"},
          {"processors",
           {ByteLevel(true, false, true),
            {{"type", "TemplateProcessing"},
             {"single", {bot_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
             {"pair",
              {bot_piece,
               {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
               {{"SpecialToken", {{"id", bot}, {"type_id", 1}}}},
               {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
             {"special_tokens",
              {{bot, {{"id", bot}, {"ids", {bot_id}}, {"tokens", {bot}}}}}}}}}};
}

// tokenizer.json: the BPE model from `bpe`, the family's pre-tokenizer, `added` as added_tokens.
OJson TokenizerJson(bool llama, const Bpe& bpe, const OJson& added, int64_t bot_id) {
  OJson vocab = OJson::object();
  for (size_t i = 0; i < bpe.vocab.size(); ++i) vocab[bpe.vocab[i]] = static_cast<int64_t>(i);
  OJson merges = OJson::array();
  for (const auto& [a, b] : bpe.merges) merges.push_back(a + " " + b);

  OJson split = {{"type", "Split"},
                 {"pattern", {{"Regex", std::string(llama ? kLlama3Regex : kQwenRegex)}}},
                 {"behavior", "Isolated"},
                 {"invert", false}};
  OJson pre = {{"type", "Sequence"}, {"pretokenizers", {split, ByteLevel(false, !llama, false)}}};

  OJson tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  tok["normalizer"] = llama ? OJson(nullptr) : OJson{{"type", "NFC"}};
  tok["pre_tokenizer"] = pre;
  tok["post_processor"] = PostProcessor(llama, bot_id);
  tok["decoder"] = ByteLevel(true, true, true);
  tok["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", llama},
                  {"vocab", vocab},
                  {"merges", merges}};
  return tok;
}

// tokenizer_config.json, with `added` as added_tokens_decoder.
OJson TokenizerConfigJson(bool llama, const OJson& added, int64_t model_max_length) {
  OJson decoder_map = OJson::object();
  for (const OJson& a : added) {
    OJson entry = a;
    const std::string id = std::to_string(entry["id"].get<int64_t>());
    entry.erase("id");
    decoder_map[id] = entry;
  }
  OJson cfg;
  cfg["added_tokens_decoder"] = decoder_map;
  cfg["bos_token"] = llama ? OJson("<|begin_of_text|>") : OJson(nullptr);
  cfg["chat_template"] = std::string(llama ? kLlama3ChatTemplate : kChatMLTemplate);
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["eos_token"] = llama ? "<|eot_id|>" : "<|im_end|>";
  cfg["model_max_length"] = model_max_length;
  cfg["pad_token"] = llama ? OJson(nullptr) : OJson("<|endoftext|>");
  cfg["tokenizer_class"] = llama ? "PreTrainedTokenizerFast" : "Qwen2Tokenizer";
  return cfg;
}

}  // namespace

absl::StatusOr<TokenizerInfo> WriteTestTokenizer(TokenizerFamily family, int64_t max_size,
                                                 int64_t model_max_length,
                                                 const std::filesystem::path& out_dir) {
  const std::vector<std::string> specials = SpecialTokens(family);
  const int64_t min_size = 256 + static_cast<int64_t>(specials.size());
  if (max_size < min_size) {
    return absl::InvalidArgumentError(absl::StrCat("--vocab ", max_size, " is too small for the generated tokenizer: it needs ",
                                          min_size, " ids (256 bytes + ", specials.size(),
                                          " special tokens); give --vocab >= ", min_size));
  }
  // Every merge adds at most one id; learn as many as fit.
  const Bpe bpe = Train(max_size - min_size);
  const bool llama = family == TokenizerFamily::kLlama3;

  std::map<std::string, int64_t> special_ids;
  OJson added = OJson::array();
  int64_t next_id = static_cast<int64_t>(bpe.vocab.size());
  for (const std::string& s : specials) {
    special_ids[s] = next_id;
    added.push_back(AddedToken(next_id, s));
    ++next_id;
  }

  const OJson tok = TokenizerJson(llama, bpe, added, llama ? special_ids.at("<|begin_of_text|>") : -1);
  const OJson cfg = TokenizerConfigJson(llama, added, model_max_length);
  if (absl::Status s = WriteText(out_dir / "tokenizer.json", tok.dump(2)); !s.ok()) return s;
  if (absl::Status s = WriteText(out_dir / "tokenizer_config.json", cfg.dump(2)); !s.ok()) return s;
  return InfoFor(family, special_ids, next_id);
}

absl::StatusOr<TokenizerInfo> CopyTokenizer(TokenizerFamily family, const std::filesystem::path& src_dir,
                                            const std::filesystem::path& out_dir) {
  const std::filesystem::path src = src_dir / "tokenizer.json";
  std::ifstream in(src, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--tokenizer: cannot open ", src.string(),
                                   "; give a folder holding tokenizer.json and tokenizer_config.json"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json tok = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (tok.is_discarded() || !tok.is_object() || !tok.contains("model") || !tok["model"].is_object() ||
      !tok["model"].contains("vocab") || !tok["model"]["vocab"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokenizer: ", src.string(), " is not a Hugging Face tokenizer.json with a model.vocab object"));
  }
  int64_t size = 0;
  for (const auto& [token, id] : tok["model"]["vocab"].items()) {
    if (id.is_number_integer()) size = std::max<int64_t>(size, id.get<int64_t>() + 1);
  }
  std::map<std::string, int64_t> special;
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
    for (const auto& t : tok["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string()) {
        continue;
      }
      const int64_t id = t["id"].get<int64_t>();
      size = std::max(size, id + 1);
      special[t["content"].get<std::string>()] = id;
    }
  }
  for (const std::string& s : SpecialTokens(family)) {
    if (!special.contains(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokenizer: ", src.string(), " has no added token ", s, "; give a ",
              family == TokenizerFamily::kLlama3 ? "Llama 3" : "Qwen", " tokenizer for this --arch"));
    }
  }
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(src_dir / name, out_dir / name, std::filesystem::copy_options::overwrite_existing,
                               ec);
    if (ec) {
      return absl::NotFoundError(absl::StrCat("--tokenizer: cannot copy ", (src_dir / name).string(), " to ",
                                     out_dir.string(), ": ", ec.message()));
    }
  }
  return InfoFor(family, special, size);
}

}  // namespace tpserve::make_model
