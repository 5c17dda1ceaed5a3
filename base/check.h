// Always-on invariant checks: a broken contract (a programming error, never
// bad input) ends the process with the file, line, the failed condition and a
// message built from the remaining arguments by absl::StrCat:
//
//   TPSERVE_CHECK(rows <= capacity, "Embedding: ", rows, " rows, room for ", capacity);
//   TPSERVE_FATAL("BlockManager: block ", id, " freed twice");
//
// Unlike assert these stay in release builds. Bad input is a Status, not a
// check (base/status_macros.h).
#pragma once

#include <string_view>

#include "absl/strings/str_cat.h"

namespace tpserve::base {

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition, std::string_view message);

}  // namespace tpserve::base

#define TPSERVE_CHECK(condition, ...)                                                             \
  do {                                                                                            \
    if (!(condition)) [[unlikely]] {                                                              \
      ::tpserve::base::CheckFailed(__FILE__, __LINE__, #condition, ::absl::StrCat(__VA_ARGS__)); \
    }                                                                                             \
  } while (false)

#define TPSERVE_FATAL(...) ::tpserve::base::CheckFailed(__FILE__, __LINE__, nullptr, ::absl::StrCat(__VA_ARGS__))
