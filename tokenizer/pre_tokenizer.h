// The tokenizer.json "pre_tokenizer": splits normalized text into pre-tokens
// that BPE encodes independently. Supported: "Split" (regex or literal pattern,
// behaviours Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous),
// "ByteLevel" (optional prefix space and the GPT-2 regex when use_regex) and a
// "Sequence" of them in which ByteLevel comes last. Pre-tokens stay raw bytes:
// the byte -> unicode mapping of ByteLevel is folded into the BPE model.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "tokenizer/regex.h"

namespace tpserve {

class PreTokenizer {
 public:
  // Parses `config` (the value of the field named `field`). The configuration
  // must contain a ByteLevel step (byte-level BPE); anything else is an error
  // naming the field.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& config,
                                                                const std::string& field);

  // Appends the pre-tokens of `text` (valid UTF-8) to `out`. Each is a view of
  // `text` or of a string appended to `storage` (a deque: addresses stay put).
  void Split(std::string_view text, std::vector<std::string_view>& out, std::deque<std::string>& storage) const;

 private:
  enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    std::unique_ptr<Regex> regex;  // Split pattern, or the GPT-2 pattern for ByteLevel with use_regex
    Behavior behavior = Behavior::kIsolated;
    bool prefix_space = false;  // ByteLevel add_prefix_space
  };

  static absl::Status AddSteps(const nlohmann::json& config, const std::string& field, PreTokenizer& out);
  static void ApplyRegex(const Step& step, std::string_view piece, std::vector<std::string_view>& out);

  std::vector<Step> steps_;  // applied in order to every piece of the previous step
  bool byte_level_ = false;
};

}  // namespace tpserve
