#include "auth/cluster_secret.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "auth/secret_file.h"

namespace tpserve {

namespace {

constexpr size_t kMinSecretBytes = 16;

void AppendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

absl::StatusOr<ClusterSecret> ClusterSecret::FromFile(const std::filesystem::path& path, absl::string_view flag) {
  absl::StatusOr<std::string> bytes = ReadSecretFile(path, flag);
  if (!bytes.ok()) return bytes.status();
  std::string secret(absl::StripTrailingAsciiWhitespace(*bytes));
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": ", path.string(), " holds ", secret.size(), " bytes; a cluster secret needs at least ",
        kMinSecretBytes, " (make one with: head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE)"));
  }
  return ClusterSecret(std::move(secret));
}

// Hex, not raw bytes: a file's trailing whitespace is not part of the secret
// (FromFile), and raw bytes end in a whitespace byte one time in 43.
ClusterSecret ClusterSecret::Generate() { return ClusterSecret(absl::BytesToHexString(RandomBytes(32))); }

std::string ClusterSecret::Mac(absl::string_view message) const {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &size);
  return std::string(reinterpret_cast<const char*>(out), size);
}

std::string ClusterSecret::HelloProof(absl::string_view challenge, uint32_t rank, uint32_t world_size) const {
  std::string message("tpserve-hello");
  message.push_back('\0');
  message.append(challenge.data(), challenge.size());
  AppendU32(message, rank);
  AppendU32(message, world_size);
  return Mac(message);
}

std::string ClusterSecret::StoreToken(absl::string_view challenge) const {
  std::string message("tpserve-store");
  message.push_back('\0');
  message.append(challenge.data(), challenge.size());
  return Mac(message);
}

}  // namespace tpserve
