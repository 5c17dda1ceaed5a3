#include "tokenizer/pre_tokenizer.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// The GPT-2 pattern that ByteLevel uses when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

absl::Status FieldError(const std::string& field, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("field '", field, "': ", absl::string_view(what.data(), what.size())));
}

bool BoolField(const nlohmann::json& config, const char* name, bool fallback) {
  auto it = config.find(name);
  return it != config.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const nlohmann::json& config,
                                                                     const std::string& field) {
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  if (absl::Status s = AddSteps(config, field, *pt); !s.ok()) return s;
  if (!pt->byte_level_) {
    return FieldError(field, "byte-level BPE needs a ByteLevel pre-tokenizer (as last step); this tokenizer.json "
                             "has none, so it is not a Llama 3 / Qwen style tokenizer");
  }
  return pt;
}

absl::Status PreTokenizer::AddSteps(const nlohmann::json& config, const std::string& field, PreTokenizer& out) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return FieldError(field, "must be an object with a string 'type'");
  }
  if (out.byte_level_) {
    return FieldError(field, "steps after ByteLevel are not supported; ByteLevel must be the last pre-tokenizer");
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array()) {
      return FieldError(field + ".pretokenizers", "must be an array");
    }
    for (size_t i = 0; i < config["pretokenizers"].size(); ++i) {
      absl::Status s = AddSteps(config["pretokenizers"][i], absl::StrCat(field, ".pretokenizers[", i, "]"), out);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  Step step;
  if (type == "Split") {
    auto pattern = config.find("pattern");
    if (pattern == config.end() || !pattern->is_object()) {
      return FieldError(field + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
    }
    const bool literal = pattern->contains("String");
    const char* key = literal ? "String" : "Regex";
    if (!pattern->contains(key) || !(*pattern)[key].is_string()) {
      return FieldError(field + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
    }
    auto regex = Regex::Compile((*pattern)[key].get<std::string>(), literal, absl::StrCat(field, ".pattern.", key));
    if (!regex.ok()) return regex.status();
    step.regex = std::move(*regex);
    if (BoolField(config, "invert", false)) return FieldError(field + ".invert", "invert: true is not supported");
    const std::string behavior = config.value("behavior", std::string("Isolated"));
    if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      return FieldError(field + ".behavior",
                        absl::StrCat("'", behavior,
                                     "' is not supported (supported: Isolated, Removed, MergedWithPrevious, "
                                     "MergedWithNext, Contiguous)"));
    }
  } else if (type == "ByteLevel") {
    step.prefix_space = BoolField(config, "add_prefix_space", true);
    if (BoolField(config, "use_regex", true)) {
      auto regex = Regex::Compile(kGpt2Pattern, false, field + ".use_regex");
      if (!regex.ok()) return regex.status();
      step.regex = std::move(*regex);
    }
    out.byte_level_ = true;
  } else {
    return FieldError(field + ".type",
                      absl::StrCat("pre-tokenizer '", type, "' is not supported (supported: Split, ByteLevel, Sequence)"));
  }
  out.steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void PreTokenizer::ApplyRegex(const Step& step, std::string_view piece, std::vector<std::string_view>& out) {
  size_t start = 0;  // first byte of `piece` not yet emitted
  size_t pending_begin = 0, pending_end = 0;  // Contiguous: the run of adjacent matches not yet emitted
  bool pending = false;
  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back(piece.substr(b, e - b));
  };
  step.regex->ForEachMatch(piece, [&](size_t b, size_t e) {
    switch (step.behavior) {
      case Behavior::kIsolated:
        emit(start, b);
        emit(b, e);
        start = e;
        break;
      case Behavior::kRemoved:
        emit(start, b);
        start = e;
        break;
      case Behavior::kMergedWithPrevious:
        emit(start, e);
        start = e;
        break;
      case Behavior::kMergedWithNext:
        emit(start, b);
        start = b;
        break;
      case Behavior::kContiguous:
        if (pending && b == pending_end) {
          pending_end = e;
        } else {
          if (pending) emit(pending_begin, pending_end);
          emit(start, b);
          pending = true;
          pending_begin = b;
          pending_end = e;
        }
        start = e;
        break;
    }
  });
  if (pending) emit(pending_begin, pending_end);
  emit(start, piece.size());
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>& out,
                         std::deque<std::string>& storage) const {
  std::vector<std::string_view> pieces{text}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (step.prefix_space && (piece.empty() || piece.front() != ' ')) {
        // Built in place, not as " " + std::string(piece): GCC 12 at -O3 (the
        // demo's Release build) warns -Wrestrict on that operator+.
        std::string& spaced = storage.emplace_back();
        spaced.reserve(piece.size() + 1);
        spaced.push_back(' ');
        spaced.append(piece);
        piece = spaced;
      }
      if (step.regex != nullptr) {
        ApplyRegex(step, piece, next);
      } else if (!piece.empty()) {
        next.push_back(piece);
      }
    }
    std::swap(pieces, next);
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

}  // namespace tpserve
