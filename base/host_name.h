// This host's name, as workers report it in Hello and the coordinator
// compares it (workers on its own host may use shared memory).
#pragma once

#include <string>

namespace tpserve {

// gethostname(), or "unknown" when it fails.
std::string HostName();

}  // namespace tpserve
