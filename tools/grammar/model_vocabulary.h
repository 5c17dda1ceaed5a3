// A model's vocabulary as the grammar engine sees it (grammar/vocabulary.h),
// from its tokenizer and config: each id's bytes decoded alone
// (Tokenizer::TokenBytes), the stop ids (generation_config.json / config.json
// eos_token_id, else tokenizer_config.json's eos_token), the special ids, and
// as many ids as the model's logits have (config.json vocab_size, when larger
// than the tokenizer's). Used by tpserve-grammar and bench/grammar_bench.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace tpserve {

struct ModelVocabulary {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::Vocabulary> vocabulary;
  std::vector<int32_t> stop_ids;
};

// `model`: a folder with tokenizer.json (and config.json, generation_config.json
// or tokenizer_config.json for the stop ids). NotFound / InvalidArgument name the file.
absl::StatusOr<ModelVocabulary> LoadModelVocabulary(const std::filesystem::path& model);

// The vocabulary of `tokenizer` over `num_ids` ids (>= tokenizer.vocab_size()).
absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> GrammarVocabulary(const Tokenizer& tokenizer,
                                                                            int32_t num_ids,
                                                                            std::vector<int32_t> stop_ids);

}  // namespace tpserve
