// The tokenizer.json "normalizer": Unicode normalization forms (NFC for Qwen;
// Llama 3 has none), alone or in a "Sequence". Implemented with utf8proc.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace tpserve {

class Normalizer {
 public:
  enum class Form { kNFC, kNFD, kNFKC, kNFKD };

  // Parses `config` (the value of the field named `field`, e.g. "normalizer").
  // null -> a normalizer that does nothing. Unsupported types are an error naming the field.
  static absl::StatusOr<Normalizer> FromJson(const nlohmann::json& config, const std::string& field);

  bool empty() const { return forms_.empty(); }

  // Normalizes valid UTF-8 `text`. ASCII text is returned unchanged without work.
  std::string Apply(std::string_view text) const;

 private:
  std::vector<Form> forms_;  // applied in order
};

}  // namespace tpserve
