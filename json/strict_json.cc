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

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return Open();
  }
  bool key(string_t& key) override {
    if (limits_.allow_duplicate_keys || keys_.back().insert(key).second) return true;
    error = absl::InvalidArgumentError(absl::StrCat(
        "repeats the key \"", key.size() > 64 ? key.substr(0, 64) + "..." : key, "\" in one object; give each once"));
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 3: syntax error ..." -> after the last ": ".
    const size_t colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    error = absl::InvalidArgumentError(absl::StrCat("is not valid JSON (byte ", position, ": ", what, ")"));
    return false;
  }

  absl::Status error;

 private:
  bool Open() {
    if (++depth_ <= limits_.max_depth) return true;
    error = absl::InvalidArgumentError(
        absl::StrCat("nests deeper than ", limits_.max_depth, " levels of arrays and objects"));
    return false;
  }

  const JsonLimits& limits_;
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // of each open object
};

}  // namespace

absl::Status CheckJson(absl::string_view text, const JsonLimits& limits) {
  LimitsSax sax(limits);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                                            /*strict=*/true);
  if (!sax.error.ok()) return sax.error;
  if (!ok) return absl::InvalidArgumentError("is not valid JSON");
  return absl::OkStatus();
}

}  // namespace tpserve
