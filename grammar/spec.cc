// GrammarSpec::CacheKey: every field, length-prefixed, so that no two specs
// share a key (a choice holding "|" cannot pass for two choices).
#include "grammar/spec.h"

#include "absl/strings/str_cat.h"

namespace tpserve::grammar {

std::string GrammarSpec::CacheKey() const {
  std::string key = absl::StrCat(static_cast<int>(kind), ":", static_cast<int>(layout), ":", text.size(), ":", text,
                                 ":", choices.size());
  for (const std::string& choice : choices) absl::StrAppend(&key, ":", choice.size(), ":", choice);
  return key;
}

}  // namespace tpserve::grammar
