#include "base/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tpserve::base {

void CheckFailed(const char* file, int line, const char* condition, std::string_view message) {
  const std::string text(message);
  if (condition != nullptr) {
    std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, condition, text.c_str());
  } else {
    std::fprintf(stderr, "%s:%d: %s\n", file, line, text.c_str());
  }
  std::fflush(stderr);
  std::abort();
}

}  // namespace tpserve::base
