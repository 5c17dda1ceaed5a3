// The tokenizer files of a generated model: either copied from a real checkpoint
// (--tokenizer DIR) or a small byte-level BPE written here in exact Hugging Face
// tokenizer.json format, so that no test needs the network.
//
// The small tokenizer: the 256 GPT-2 byte-level symbols (ids 0..255, by byte
// value), merges learned by a BPE pass over a built-in English text (ids 256..),
// then the family's special tokens as added tokens:
//   Llama 3: <|begin_of_text|>, <|end_of_text|>, <|start_header_id|>, <|end_header_id|>, <|eot_id|>
//   Qwen:    <|endoftext|>, <|im_start|>, <|im_end|>
// with the family's Split regex + ByteLevel pre-tokenizer, post-processor (Llama 3
// prepends <|begin_of_text|>) and ByteLevel decoder, plus a tokenizer_config.json
// whose chat_template carries the family's markers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve::make_model {

enum class TokenizerFamily { kLlama3, kQwen };

// What config.json / generation_config.json need to know about the tokenizer.
struct TokenizerInfo {
  int64_t size = 0;                     // 1 + the largest token id (vocab_size must be >= this)
  int64_t bos_id = 0;                   // <|begin_of_text|> or <|endoftext|>
  std::vector<int64_t> config_eos;      // config.json eos_token_id
  std::vector<int64_t> generation_eos;  // generation_config.json eos_token_id
};

// Writes tokenizer.json and tokenizer_config.json into `out_dir`. At most
// `max_size` ids are used (byte symbols + merges + special tokens); fewer merges
// are learned when it is small. `model_max_length` goes into tokenizer_config.json.
absl::StatusOr<TokenizerInfo> WriteTestTokenizer(TokenizerFamily family, int64_t max_size,
                                                 int64_t model_max_length,
                                                 const std::filesystem::path& out_dir);

// Copies tokenizer.json and tokenizer_config.json from `src_dir` into `out_dir`
// and finds the family's special tokens in it (an error when they are missing,
// e.g. a Qwen tokenizer given for --arch llama).
absl::StatusOr<TokenizerInfo> CopyTokenizer(TokenizerFamily family, const std::filesystem::path& src_dir,
                                            const std::filesystem::path& out_dir);

}  // namespace tpserve::make_model
