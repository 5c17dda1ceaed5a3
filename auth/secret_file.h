// Reading a file that holds a secret (the cluster secret, API keys): it must
// be a regular file that only its owner may read (like ssh's private keys),
// so a secret left readable by everyone is refused with the chmod that
// fixes it, and at most 1 MiB.
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace tpserve {

// The file's bytes. `flag` names the flag that gave the path, for the errors:
// NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT (group or other may read
// it, not a regular file, too large), each naming the path and the fix.
absl::StatusOr<std::string> ReadSecretFile(const std::filesystem::path& path, absl::string_view flag);

// Writes `secret` to a new file `path` that only this user may read (0600).
absl::Status WriteSecretFile(const std::filesystem::path& path, absl::string_view secret);

// `size` bytes from the operating system's random generator (OpenSSL's).
std::string RandomBytes(size_t size);

// Whether a == b, in time that depends only on their lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace tpserve
