// A compiled PCRE2 pattern (UTF + UCP, JIT when available) that reports the
// byte ranges of its successive non-overlapping matches. Safe to use from many
// threads at once: match data and the JIT stack live in thread-local storage.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tpserve {

class Regex {
 public:
  // Compiles `pattern` (a regex, or a literal string when `literal`). A bad
  // pattern is an InvalidArgument error that names `field` and the offset.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern, bool literal,
                                                        const std::string& field);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for each non-empty match in `text` (valid UTF-8),
  // left to right, as byte offsets into `text`.
  void ForEachMatch(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code*
  bool jit_ = false;
};

}  // namespace tpserve
