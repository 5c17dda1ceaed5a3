// Finds the program a launcher is asked to run, before any child is started, so
// a typo is one clear error instead of N children failing at exec.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tpserve {

// A name with a '/' is used as given; otherwise each directory of `path` (the
// PATH value; empty entries mean the current directory) is tried in order.
// NOT_FOUND when nothing is there, PERMISSION_DENIED when the file exists but is
// not executable (or is a directory); the message names the program and what to do.
absl::StatusOr<std::string> FindProgram(const std::string& name, const std::string& path);

// The shell's status for a program that could not be started: 127 for NOT_FOUND,
// 126 otherwise.
int ExecFailureStatus(const absl::Status& status);

}  // namespace tpserve
