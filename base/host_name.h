// This host's name, as workers report it in Hello and the coordinator
// compares it (workers on its own host may use shared memory).
#pragma once

#include <string>
#include <string_view>

namespace tpserve {

// gethostname(), or "unknown" when it fails.
std::string HostName();

}  // namespace tpserve

namespace tpserve {

// Whether the HOST of a gRPC address "HOST:PORT" ("[::1]:PORT", "unix:PATH")
// can only be reached from this machine: 127.0.0.0/8, ::1, localhost, or a
// unix socket. 0.0.0.0 and [::] listen everywhere: false.
bool IsLoopbackAddress(std::string_view address);

}  // namespace tpserve
