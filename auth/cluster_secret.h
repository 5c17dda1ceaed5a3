// The cluster secret: what a worker proves it holds before the coordinator
// sends it anything (docs/architecture.md, "Security").
//
//   1. The worker asks for a challenge (Worker.Challenge): 32 random bytes,
//      single use, held by the coordinator for a minute.
//   2. Its Hello carries the challenge and
//        proof = HMAC-SHA256(secret, "tpserve-hello" 0 challenge rank world_size)
//      (rank and world size as 4-byte little-endian integers), so a proof
//      cannot be replayed for another session or rank and the secret never
//      travels.
//   3. Its StoreSet / StoreGet calls carry, in metadata, the store token
//        HMAC-SHA256(secret, "tpserve-store" 0 challenge)
//      of its admitted session; anything else is UNAUTHENTICATED.
//
// The secret is the bytes of a private file (--cluster-secret-file, or the
// TPSERVE_CLUSTER_SECRET_FILE environment variable), trailing whitespace
// removed, at least 16 bytes: `head -c 32 /dev/urandom | base64 > F; chmod 600 F`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace tpserve {

// The environment variable a worker reads the secret file's path from when
// --cluster-secret-file is not given (and which --spawn-workers sets).
inline constexpr char kClusterSecretFileEnv[] = "TPSERVE_CLUSTER_SECRET_FILE";
// The gRPC metadata key of the store token (binary: "-bin").
inline constexpr char kStoreTokenMetadata[] = "tpserve-store-token-bin";
inline constexpr size_t kChallengeBytes = 32;

class ClusterSecret {
 public:
  // Reads a secret file (auth/secret_file.h's rules); `flag` names its source
  // in errors. INVALID_ARGUMENT when shorter than 16 bytes.
  static absl::StatusOr<ClusterSecret> FromFile(const std::filesystem::path& path, absl::string_view flag);
  // 32 fresh random bytes as 64 hex digits (--spawn-workers without a
  // configured secret): written to a file, it reads back the same.
  static ClusterSecret Generate();

  const std::string& bytes() const { return secret_; }

  std::string HelloProof(absl::string_view challenge, uint32_t rank, uint32_t world_size) const;
  std::string StoreToken(absl::string_view challenge) const;

 private:
  explicit ClusterSecret(std::string secret) : secret_(std::move(secret)) {}
  std::string Mac(absl::string_view message) const;

  std::string secret_;
};

}  // namespace tpserve
