// Parsing JSON that came from outside (a request body, a gRPC field holding
// JSON text) within limits, before any DOM exists: nlohmann's dump(), its
// comparisons and copies recurse once per level, so a body nesting 80,000
// levels deep in 160 KB would overflow the stack wherever the value is next
// serialized; and duplicate keys would silently keep the last value, which a
// proxy or validator in front may have read differently.
//
// CheckJson walks the text with nlohmann's SAX parser (iterative: its own
// depth costs no stack) and stops at the first level past `max_depth` or the
// first repeated key of an object. ParseJson then builds the DOM.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tpserve {

struct JsonLimits {
  int max_depth = 128;          // arrays and objects open at once
  bool allow_duplicate_keys = false;
  int64_t max_values = -1;      // values of any kind (objects and arrays too); -1: any number
};

// What CheckJson found wrong, for callers that answer each fault their own way.
enum class JsonFault : uint8_t { kNone, kSyntax, kTooDeep, kTooManyValues, kDuplicateKey };

// OK when `text` is one JSON value within `limits`; else INVALID_ARGUMENT
// saying what is wrong ("is not valid JSON (byte N: ...)", "nests deeper than
// 128 levels of arrays and objects", "repeats the key \"model\" ...", "holds
// more than N values"), to follow the name of what held it. `fault` (when
// given) says which; `values` (when given) counts the values read.
absl::Status CheckJson(absl::string_view text, const JsonLimits& limits = {}, JsonFault* fault = nullptr,
                       int64_t* values = nullptr);

// CheckJson, then the value (nlohmann::json or nlohmann::ordered_json).
template <typename Json = nlohmann::json>
absl::StatusOr<Json> ParseJson(absl::string_view text, const JsonLimits& limits = {}) {
  if (absl::Status s = CheckJson(text, limits); !s.ok()) return s;
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return absl::InvalidArgumentError("is not valid JSON");
  return value;
}

}  // namespace tpserve
