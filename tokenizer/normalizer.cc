#include "tokenizer/normalizer.h"

#include <cstdlib>

#include <utf8proc.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

absl::Status AddForms(const nlohmann::json& config, const std::string& field, std::vector<Normalizer::Form>& forms) {
  if (config.is_null()) return absl::OkStatus();
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("field '", field, "' must be null or an object with a string 'type'"));
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "NFC") {
    forms.push_back(Normalizer::Form::kNFC);
  } else if (type == "NFD") {
    forms.push_back(Normalizer::Form::kNFD);
  } else if (type == "NFKC") {
    forms.push_back(Normalizer::Form::kNFKC);
  } else if (type == "NFKD") {
    forms.push_back(Normalizer::Form::kNFKD);
  } else if (type == "Sequence") {
    if (!config.contains("normalizers") || !config["normalizers"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("field '", field, ".normalizers' must be an array"));
    }
    for (size_t i = 0; i < config["normalizers"].size(); ++i) {
      absl::Status s = AddForms(config["normalizers"][i], absl::StrCat(field, ".normalizers[", i, "]"), forms);
      if (!s.ok()) return s;
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("field '", field, ".type': normalizer '", type,
                                                   "' is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)"));
  }
  return absl::OkStatus();
}

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& config, const std::string& field) {
  Normalizer n;
  absl::Status s = AddForms(config, field, n.forms_);
  if (!s.ok()) return s;
  return n;
}

std::string Normalizer::Apply(std::string_view text) const {
  std::string out(text);
  if (forms_.empty() || IsAscii(text)) return out;  // every form leaves ASCII alone
  for (Form f : forms_) {
    int options = UTF8PROC_STABLE;
    switch (f) {
      case Form::kNFC: options |= UTF8PROC_COMPOSE; break;
      case Form::kNFD: options |= UTF8PROC_DECOMPOSE; break;
      case Form::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
      case Form::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(out.data()),
                                            static_cast<utf8proc_ssize_t>(out.size()), &dst,
                                            static_cast<utf8proc_option_t>(options));
    // The input is valid UTF-8 (Tokenizer::Encode repairs it first), so utf8proc
    // can only fail on allocation; keep the text unnormalized then.
    if (n >= 0) out.assign(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
    std::free(dst);
  }
  return out;
}

}  // namespace tpserve
