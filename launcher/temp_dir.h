// A fresh private directory for the ranks a launcher starts (their FileStore
// rendezvous, their logs), and its removal.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tpserve {

// Creates $TMPDIR/<prefix>XXXXXX (/tmp when TMPDIR is unset or empty), mode
// 0700. INTERNAL naming the path and errno when it cannot be made.
absl::StatusOr<std::string> MakeTempDir(std::string_view prefix);

// Removes `dir` and everything under it; errors are ignored (best effort).
void RemoveTempDir(const std::string& dir);

}  // namespace tpserve
