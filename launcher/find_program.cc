#include "launcher/find_program.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tpserve {
namespace {

// 0: an executable regular file; ENOENT: nothing there; EACCES: there but not runnable.
int Check(const std::string& file) {
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) return ENOENT;
  if (!S_ISREG(st.st_mode) || access(file.c_str(), X_OK) != 0) return EACCES;
  return 0;
}

}  // namespace

absl::StatusOr<std::string> FindProgram(const std::string& name, const std::string& path) {
  if (name.empty()) return absl::InvalidArgumentError("no program given: put it after '--'");
  if (name.find('/') != std::string::npos) {
    const int err = Check(name);
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("program '", name, "' does not exist"));
    if (err == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat("program '", name, "' is not an executable file (chmod +x it, or run it through its interpreter)"));
    }
    return name;
  }
  bool found_unrunnable = false;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    const std::string file = dir.empty() ? name : absl::StrCat(dir, "/", name);
    const int err = Check(file);
    if (err == 0) return file;
    if (err == EACCES) found_unrunnable = true;
  }
  if (found_unrunnable) {
    return absl::PermissionDeniedError(
        absl::StrCat("program '", name, "' is on PATH but not executable (chmod +x it)"));
  }
  return absl::NotFoundError(absl::StrCat("program '", name, "' not found on PATH (", path,
                                          "): give its full path or add its folder to PATH"));
}

int ExecFailureStatus(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound ? 127 : 126;
}

}  // namespace tpserve
