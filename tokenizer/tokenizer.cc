#include "tokenizer/tokenizer.h"

#include <deque>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace tpserve {
namespace {

absl::Status FieldError(const std::string& field, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("field '", field, "': ", absl::string_view(what.data(), what.size())));
}

const nlohmann::json& Field(const nlohmann::json& root, const char* name) {
  static const nlohmann::json kNull;
  auto it = root.find(name);
  return it == root.end() ? kNull : *it;
}

}  // namespace

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file = path / "tokenizer.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open tokenizer file ", file.string(),
                                            ": pass a model folder holding tokenizer.json, or the file itself"));
  }
  std::ostringstream content;
  content << in.rdbuf();
  return FromJsonText(content.str(), file.string());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonText(std::string_view json_text, std::string_view source) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  absl::Status status;
  try {
    const nlohmann::json root = nlohmann::json::parse(json_text);
    status = tokenizer->Parse(root);
  } catch (const nlohmann::json::exception& e) {
    status = absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("tokenizer ", absl::string_view(source.data(), source.size()), ": ", status.message()));
  }
  return tokenizer;
}

absl::Status Tokenizer::Parse(const nlohmann::json& root) {
  if (!root.is_object()) return absl::InvalidArgumentError("the top level must be a JSON object");
  if (!root.contains("model")) return FieldError("model", "is missing");
  auto model = BpeModel::FromJson(root["model"], "model");
  if (!model.ok()) return model.status();
  model_ = std::move(*model);

  auto normalizer = Normalizer::FromJson(Field(root, "normalizer"), "normalizer");
  if (!normalizer.ok()) return normalizer.status();
  normalizer_ = std::move(*normalizer);

  auto pre_tokenizer = PreTokenizer::FromJson(Field(root, "pre_tokenizer"), "pre_tokenizer");
  if (!pre_tokenizer.ok()) return pre_tokenizer.status();
  pre_tokenizer_ = std::move(*pre_tokenizer);

  // The id -> piece table: model tokens first, added tokens override.
  pieces_.assign(static_cast<size_t>(model_->size()), Piece{});
  for (const auto& [token, id] : model_->vocab()) {
    Piece& p = pieces_[static_cast<size_t>(id)];
    p.kind = Piece::Kind::kBytes;
    // Like HF's ByteLevel decoder: a token with a character outside the byte map stands for its own UTF-8.
    p.text = byte_level::TokenToBytes(token).value_or(token);
  }
  if (absl::Status s = ParseAddedTokens(root); !s.ok()) return s;
  if (absl::Status s = ParsePostProcessor(Field(root, "post_processor"), "post_processor"); !s.ok()) return s;
  return CheckDecoder(Field(root, "decoder"), "decoder");
}

absl::Status Tokenizer::ParseAddedTokens(const nlohmann::json& root) {
  const nlohmann::json& list = Field(root, "added_tokens");
  if (list.is_null()) return absl::OkStatus();
  if (!list.is_array()) return FieldError("added_tokens", "must be an array");
  added_.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    const nlohmann::json& t = list[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= (int64_t{1} << 30)) {
      return FieldError(field + ".id", "must be an integer in [0, 2^30)");
    }
    if (!t.contains("content") || !t["content"].is_string() || t["content"].get_ref<const std::string&>().empty()) {
      return FieldError(field + ".content", "must be a non-empty string");
    }
    AddedToken token;
    token.id = t["id"].get<int32_t>();
    token.content = t["content"].get<std::string>();
    token.special = t.value("special", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.single_word = t.value("single_word", false);
    token.normalized = t.value("normalized", !token.special);  // HF's default
    if (!utf8::IsValid(token.content)) return FieldError(field + ".content", "is not valid UTF-8");
    added_.push_back(std::move(token));
  }
  std::vector<const AddedToken*> raw, normalized;
  for (const AddedToken& t : added_) {
    added_by_content_[t.content] = t.id;
    (t.normalized && !normalizer_.empty() ? normalized : raw).push_back(&t);
    if (static_cast<size_t>(t.id) >= pieces_.size()) pieces_.resize(static_cast<size_t>(t.id) + 1);
    Piece& p = pieces_[static_cast<size_t>(t.id)];
    p.kind = Piece::Kind::kAdded;
    p.special = t.special;
    p.text = t.content;
  }
  raw_matcher_ = AddedTokenMatcher(raw);
  normalized_matcher_ = AddedTokenMatcher(normalized);
  return absl::OkStatus();
}

absl::Status Tokenizer::ParsePostProcessor(const nlohmann::json& config, const std::string& field) {
  if (config.is_null()) return absl::OkStatus();
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return FieldError(field, "must be null or an object with a string 'type'");
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "ByteLevel") return absl::OkStatus();  // only adjusts offsets
  if (type == "Sequence") {
    const nlohmann::json& list = Field(config, "processors");
    if (!list.is_array()) return FieldError(field + ".processors", "must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      absl::Status s = ParsePostProcessor(list[i], absl::StrCat(field, ".processors[", i, "]"));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return FieldError(field + ".type", absl::StrCat("post-processor '", type,
                                                    "' is not supported (supported: TemplateProcessing, ByteLevel, "
                                                    "Sequence)"));
  }
  const nlohmann::json& single = Field(config, "single");
  if (!single.is_array()) return FieldError(field + ".single", "must be an array");
  const nlohmann::json& specials = Field(config, "special_tokens");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string item_field = absl::StrCat(field, ".single[", i, "]");
    const nlohmann::json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken") || !item["SpecialToken"].is_object() ||
        !item["SpecialToken"].contains("id") || !item["SpecialToken"]["id"].is_string()) {
      return FieldError(item_field, "must be {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    std::vector<int32_t> ids;
    if (specials.is_object() && specials.contains(name) && specials[name].contains("ids") &&
        specials[name]["ids"].is_array()) {
      for (const auto& id : specials[name]["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size()) {
          return FieldError(absl::StrCat(field, ".special_tokens[\"", name, "\"].ids"),
                            "must hold ids of the vocabulary");
        }
        ids.push_back(id.get<int32_t>());
      }
    } else if (auto id = TokenToId(name)) {
      ids.push_back(*id);
    } else {
      return FieldError(item_field, absl::StrCat("special token \"", name, "\" is not in the vocabulary"));
    }
    (seen_sequence ? suffix : prefix).insert((seen_sequence ? suffix : prefix).end(), ids.begin(), ids.end());
  }
  // A later processor wraps the output of the earlier ones.
  prefix.insert(prefix.end(), prefix_ids_.begin(), prefix_ids_.end());
  prefix_ids_ = std::move(prefix);
  suffix_ids_.insert(suffix_ids_.end(), suffix.begin(), suffix.end());
  return absl::OkStatus();
}

absl::Status Tokenizer::CheckDecoder(const nlohmann::json& config, const std::string& field) const {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return FieldError(field, "must be an object with a string 'type' (ByteLevel for byte-level BPE)");
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    const nlohmann::json& list = Field(config, "decoders");
    if (!list.is_array() || list.empty()) return FieldError(field + ".decoders", "must be a non-empty array");
    for (size_t i = 0; i < list.size(); ++i) {
      absl::Status s = CheckDecoder(list[i], absl::StrCat(field, ".decoders[", i, "]"));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return FieldError(field + ".type",
                    absl::StrCat("decoder '", type, "' is not supported (supported: ByteLevel, Sequence of ByteLevel)"));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                                       SpecialTokensInText specials) const {
  const bool match_special = specials == SpecialTokensInText::kMatch;
  std::string repaired;
  if (!utf8::IsValid(text)) {
    repaired = utf8::Lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + prefix_ids_.size() + suffix_ids_.size() + 4);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  if (raw_matcher_.empty()) {
    EncodeSection(text, match_special, ids);
  } else {
    std::vector<AddedTokenMatcher::Segment> segments;
    raw_matcher_.Split(text, segments, match_special);
    for (const auto& seg : segments) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
      } else {
        EncodeSection(text.substr(seg.begin, seg.end - seg.begin), match_special, ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

void Tokenizer::EncodeSection(std::string_view text, bool match_special, std::vector<int32_t>& ids) const {
  if (normalizer_.empty()) {
    EncodeWords(text, ids);
    return;
  }
  const std::string normalized = normalizer_.Apply(text);
  if (normalized_matcher_.empty()) {
    EncodeWords(normalized, ids);
    return;
  }
  std::vector<AddedTokenMatcher::Segment> segments;
  normalized_matcher_.Split(normalized, segments, match_special);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      EncodeWords(std::string_view(normalized).substr(seg.begin, seg.end - seg.begin), ids);
    }
  }
}

void Tokenizer::EncodeWords(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<std::string_view> words;
  std::deque<std::string> storage;
  pre_tokenizer_->Split(text, words, storage);
  for (std::string_view word : words) model_->Encode(word, ids);
}

const Tokenizer::Piece* Tokenizer::PieceOf(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return nullptr;
  const Piece& p = pieces_[static_cast<size_t>(id)];
  return p.kind == Piece::Kind::kNone ? nullptr : &p;
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out, bytes;  // `bytes`: the current run of byte tokens, decoded together
  for (size_t i = 0; i < ids.size(); ++i) {
    const Piece* p = PieceOf(ids[i]);
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is not in the vocabulary (ids are 0..", vocab_size() - 1, ")"));
    }
    if (p->kind == Piece::Kind::kBytes) {
      bytes += p->text;
      continue;
    }
    if (skip_special_tokens && p->special) continue;
    utf8::AppendLossy(bytes, out);
    bytes.clear();
    out += p->text;
  }
  utf8::AppendLossy(bytes, out);
  return out;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_by_content_.find(absl::string_view(token.data(), token.size())); it != added_by_content_.end()) return it->second;
  if (auto it = model_->vocab().find(absl::string_view(token.data(), token.size())); it != model_->vocab().end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const Piece* p = PieceOf(id);
  return p != nullptr && p->kind == Piece::Kind::kAdded && p->special;
}

std::optional<std::string> Tokenizer::TokenBytes(int32_t id) const {
  const Piece* p = PieceOf(id);
  if (p == nullptr) return std::nullopt;
  return p->text;
}

}  // namespace tpserve
