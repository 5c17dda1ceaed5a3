// tpserve::Tokenizer: a Hugging Face tokenizer.json for byte-level BPE models
// (Llama 3, Qwen2/3), matching the Hugging Face `tokenizers` library:
//
//   text -> split out added tokens (raw text) -> normalizer (NFC, ...) -> split out
//   "normalized" added tokens -> pre-tokenizer (Split regex, ByteLevel) ->
//   BPE per pre-token (cached) -> post-processor (TemplateProcessing adds e.g.
//   <|begin_of_text|> when add_special_tokens) -> ids
//
//   ids -> added tokens as their literal content, runs of other tokens as the
//   bytes they stand for, decoded as UTF-8 with U+FFFD for ill-formed bytes
//
// Encode and Decode are const and safe to call from many threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace tpserve {

// How Encode treats the content of an added token marked special
// (<|im_end|>, <|eot_id|>, ...) when it is written in the text.
enum class SpecialTokensInText {
  kMatch,   // it is that special token (Hugging Face's default)
  kAsText,  // it is plain text: its bytes go through BPE like any other characters
            // (HF's split_special_tokens; untrusted text cannot forge control tokens)
};

class Tokenizer {
 public:
  // Loads `path`: a model folder holding tokenizer.json, or the json file itself.
  // Errors name the file and the offending field (NotFound for a missing file,
  // InvalidArgument for broken JSON or unsupported components).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::filesystem::path& path);
  // Same from the file's content; `source` names it in error messages.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJsonText(std::string_view json_text, std::string_view source);

  ~Tokenizer();

  // Token ids of `text`. Ill-formed UTF-8 in `text` is first replaced by U+FFFD.
  // add_special_tokens applies the post-processor (e.g. Llama 3's BOS) either way.
  // Added tokens written in the text are recognised, except those marked special
  // when `specials` is kAsText (non-special added tokens such as Qwen's <think>
  // are words of the vocabulary and always match, as in Hugging Face).
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens,
                              SpecialTokensInText specials = SpecialTokensInText::kMatch) const;

  // Text of `ids`. An id outside [0, vocab_size()) or without a token is
  // InvalidArgument naming the id. skip_special_tokens drops added tokens marked special.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // 1 + the largest id of the model vocabulary and the added tokens.
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }

  // Id of a token spelled as in tokenizer.json ("<|im_end|>", "Ġthe"), if any.
  std::optional<int32_t> TokenToId(std::string_view token) const;

  // True for added tokens marked "special" (<|eot_id|>, <|im_end|>, ...).
  bool IsSpecial(int32_t id) const;

  // The bytes `id` stands for decoded alone: a vocabulary token's raw bytes
  // (possibly part of a UTF-8 character), an added token's content; nullopt
  // for an id with no token. What a grammar matcher sees (grammar/vocabulary.h).
  std::optional<std::string> TokenBytes(int32_t id) const;

 private:
  friend class IncrementalDetokenizer;

  // What one id decodes to.
  struct Piece {
    enum class Kind : uint8_t { kNone, kBytes, kAdded };
    Kind kind = Kind::kNone;  // kNone: no token has this id
    bool special = false;     // added token marked special
    std::string text;         // kBytes: the raw bytes; kAdded: the literal content
  };

  Tokenizer() = default;
  absl::Status Parse(const nlohmann::json& root);
  absl::Status ParseAddedTokens(const nlohmann::json& root);
  absl::Status ParsePostProcessor(const nlohmann::json& config, const std::string& field);
  absl::Status CheckDecoder(const nlohmann::json& config, const std::string& field) const;
  void EncodeSection(std::string_view text, bool match_special, std::vector<int32_t>& ids) const;
  void EncodeWords(std::string_view text, std::vector<int32_t>& ids) const;
  const Piece* PieceOf(int32_t id) const;

  Normalizer normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::vector<AddedToken> added_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized = true
  std::vector<int32_t> prefix_ids_;       // post-processor, before the text (e.g. BOS)
  std::vector<int32_t> suffix_ids_;       // post-processor, after the text
  std::vector<Piece> pieces_;             // [vocab_size] by id
};

}  // namespace tpserve
