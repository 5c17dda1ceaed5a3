#include "tools/grammar/model_vocabulary.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "model/config.h"

namespace tpserve {
namespace {

// tokenizer_config.json's eos_token ("<|im_end|>" or {"content": ...}), as an id.
std::vector<int32_t> EosFromTokenizerConfig(const std::filesystem::path& dir, const Tokenizer& tokenizer) {
  std::ifstream in(dir / "tokenizer_config.json");
  if (!in) return {};
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("eos_token")) return {};
  const nlohmann::json& eos = config["eos_token"];
  std::string content;
  if (eos.is_string()) content = eos.get<std::string>();
  if (eos.is_object() && eos.contains("content") && eos["content"].is_string()) content = eos["content"].get<std::string>();
  if (auto id = tokenizer.TokenToId(content)) return {*id};
  return {};
}

}  // namespace

absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> GrammarVocabulary(const Tokenizer& tokenizer,
                                                                            int32_t num_ids,
                                                                            std::vector<int32_t> stop_ids) {
  num_ids = std::max(num_ids, tokenizer.vocab_size());
  std::vector<std::string> bytes(static_cast<size_t>(num_ids));
  std::vector<bool> special(static_cast<size_t>(num_ids), false);
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (auto b = tokenizer.TokenBytes(id)) bytes[static_cast<size_t>(id)] = *std::move(b);
    special[static_cast<size_t>(id)] = tokenizer.IsSpecial(id);
  }
  return grammar::Vocabulary::Create(std::move(bytes), std::move(stop_ids), std::move(special));
}

absl::StatusOr<ModelVocabulary> LoadModelVocabulary(const std::filesystem::path& model) {
  ModelVocabulary out;
  auto tokenizer = Tokenizer::Load(model);
  if (!tokenizer.ok()) return tokenizer.status();
  out.tokenizer = *std::move(tokenizer);
  const std::filesystem::path dir = std::filesystem::is_directory(model) ? model : model.parent_path();
  int64_t num_ids = out.tokenizer->vocab_size();
  if (std::filesystem::exists(dir / "config.json")) {
    auto config = LoadModelConfig(dir);
    if (!config.ok()) return config.status();
    num_ids = std::max(num_ids, config->vocab_size);
    for (int64_t id : config->eos_token_ids) out.stop_ids.push_back(static_cast<int32_t>(id));
  }
  if (out.stop_ids.empty()) out.stop_ids = EosFromTokenizerConfig(dir, *out.tokenizer);
  if (out.stop_ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no stop ids for ", dir.string(),
        ": neither config.json / generation_config.json eos_token_id nor tokenizer_config.json eos_token"));
  }
  auto vocabulary = GrammarVocabulary(*out.tokenizer, static_cast<int32_t>(num_ids), out.stop_ids);
  if (!vocabulary.ok()) return vocabulary.status();
  out.vocabulary = *std::move(vocabulary);
  return out;
}

}  // namespace tpserve
