// Reading this process's /proc/self/status.
#pragma once

#include <cstdint>
#include <string_view>

namespace tpserve {

// The value of a "Name:   N kB" line of /proc/self/status in kB (VmRSS is the
// resident set now, VmHWM its peak), or -1 when the file or field is missing.
int64_t ProcStatusKb(std::string_view field);

}  // namespace tpserve
