#include "launcher/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<std::string> MakeTempDir(std::string_view prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/", std::string(prefix), "XXXXXX");
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("could not create a temporary directory ", path, ": ",
                                            std::strerror(errno), "; set TMPDIR to a writable folder"));
  }
  return path;
}

void RemoveTempDir(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace tpserve
