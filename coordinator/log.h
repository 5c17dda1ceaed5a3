// One line to the coordinator's log (stderr), prefixed "tpserve-coordinator: ".
#pragma once

#include <cstdio>
#include <string>

#include "absl/strings/string_view.h"

namespace tpserve {

inline void CoordinatorLog(absl::string_view line) {
  std::string out = "tpserve-coordinator: ";
  out.append(line.data(), line.size());
  out.push_back('\n');
  std::fwrite(out.data(), 1, out.size(), stderr);  // one write: lines from threads do not interleave
  std::fflush(stderr);
}

}  // namespace tpserve
