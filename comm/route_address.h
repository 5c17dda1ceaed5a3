// The address of this host that its routes use toward another one: what a
// rank should bind its collective transport (gloo) to so that peers on other
// hosts reach it, when the user names none. No packet is sent: a UDP socket is
// connect()ed (which only picks the route and source address) and asked its
// local name, as torch's and gloo's own "which interface" guesses do.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// `peer`: the address a process dials, "HOST:PORT", "[IPV6]:PORT" or
// "unix:PATH"; HOST a name or a literal. Returns the numeric local address
// ("10.0.0.2", "::1", ...) the kernel would send from toward HOST; for a
// unix: peer (same host) "127.0.0.1". INVALID_ARGUMENT for a malformed peer,
// UNAVAILABLE naming the host when it does not resolve or has no route.
absl::StatusOr<std::string> LocalAddressToward(absl::string_view peer);

}  // namespace tpserve
