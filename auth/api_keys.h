// The public API's bearer keys (--api-key-file): a client sends
// "authorization: Bearer KEY" with each call; a missing or unknown key is
// UNAUTHENTICATED. Keys are compared through their SHA-256 digests in
// constant time, against every key, and never logged.
//
// The file: one key per line, optionally named (`NAME KEY`; the name is the
// client's identity in logs and per-client limits, default "key-LINE"); blank
// lines and lines starting with '#' are skipped. Private (chmod 600).
#pragma once

#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

// gRPC metadata by which a trusted front (tpserve-http) names the client a
// call is for: its own caller's API key name. The coordinator accepts it only
// from a key it lists in --trusted-fronts, and the client is then
// "FRONT/NAME" (coordinator/generation_service.h); from anyone else the call
// is PERMISSION_DENIED, so a client cannot claim another's name.
inline constexpr char kClientNameMetadata[] = "x-tpserve-client";

class ApiKeys {
 public:
  // INVALID_ARGUMENT naming the line for a key shorter than 16 characters or
  // a duplicate, and for a file without keys.
  static absl::StatusOr<ApiKeys> FromFile(const std::filesystem::path& path);
  static absl::StatusOr<ApiKeys> FromText(absl::string_view text, absl::string_view source);

  // The name of the key `presented` (nullopt: no such key).
  std::optional<std::string> Match(absl::string_view presented) const;
  // The key from an "authorization" header value "Bearer KEY" (nullopt when
  // the value has another form).
  static std::optional<absl::string_view> BearerToken(absl::string_view header);

  size_t size() const { return keys_.size(); }

 private:
  struct Key {
    std::string name;
    std::array<unsigned char, 32> digest;
  };
  std::vector<Key> keys_;
};

// A client's side: the key in a key file (the first `KEY` or `NAME KEY` line;
// blank lines and '#' comments skipped; a private file, read as
// ReadSecretFile reads it). `flag` names the flag in errors; a file without a
// key is INVALID_ARGUMENT. tpserve-client and tpserve-http send it.
absl::StatusOr<std::string> ReadClientApiKey(const std::filesystem::path& path, absl::string_view flag);

}  // namespace tpserve
