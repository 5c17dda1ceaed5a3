#include "json/strict_json.h"

#include <set>
#include <string>
#include <vector>

namespace tpserve {
namespace {

// Counts the depth and the keys of each open object; stops (returns false) at
// the first thing past the limits, leaving `error` saying what.
class LimitsSax final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit LimitsSax(const JsonLimits& limits) : limits_(limits) {}

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override {
    if (!limits_.allow_duplicate_keys) keys_.emplace_back();
    return Value() && Open();
  }
  bool key(string_t& key) override {
    if (limits_.allow_duplicate_keys || keys_.back().insert(key).second) return true;
    Fail(JsonFault::kDuplicateKey,
         absl::StrCat("repeats the key \"", key.size() > 64 ? key.substr(0, 64) + "..." : key,
                      "\" in one object; give each once"));
    return false;
  }
  bool end_object() override {
    if (!limits_.allow_duplicate_keys) keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return Value() && Open(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 3: syntax error ..." -> after the last ": ".
    const size_t colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    Fail(JsonFault::kSyntax, absl::StrCat("is not valid JSON (byte ", position, ": ", what, ")"));
    return false;
  }

  absl::Status error;
  JsonFault fault = JsonFault::kNone;
  int64_t values = 0;

 private:
  void Fail(JsonFault f, std::string message) {
    fault = f;
    error = absl::InvalidArgumentError(std::move(message));
  }
  bool Value() {
    if (limits_.max_values < 0 || ++values <= limits_.max_values) return true;
    Fail(JsonFault::kTooManyValues, absl::StrCat("holds more than ", limits_.max_values, " values"));
    return false;
  }
  bool Open() {
    if (++depth_ <= limits_.max_depth) return true;
    Fail(JsonFault::kTooDeep, absl::StrCat("nests deeper than ", limits_.max_depth, " levels of arrays and objects"));
    return false;
  }

  const JsonLimits& limits_;
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // of each open object
};

}  // namespace

absl::Status CheckJson(absl::string_view text, const JsonLimits& limits, JsonFault* fault, int64_t* values) {
  LimitsSax sax(limits);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                                            /*strict=*/true);
  if (!ok && sax.error.ok()) {  // stopped without a callback saying why
    sax.fault = JsonFault::kSyntax;
    sax.error = absl::InvalidArgumentError("is not valid JSON");
  }
  if (fault != nullptr) *fault = sax.fault;
  if (values != nullptr) *values = sax.values;
  return sax.error;
}

}  // namespace tpserve
