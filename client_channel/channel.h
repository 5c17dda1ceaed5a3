// Connecting to the public API as a client (tpserve-client, tpserve-http):
// TLS credentials from the TLS flags, and the API key to send from a key file.
// Small on purpose: only what every client of tpserve.v1 needs.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// The TLS flags of a client. `flag_prefix` is how the caller spells them
// ("--" for --tls-ca, "--server-" for --server-tls-ca), so errors name its flags.
struct ClientTlsOptions {
  bool tls = false;   // TLS with the system's roots (implied by ca or cert)
  std::string ca;     // PEM CA bundle that signed the server's certificate
  std::string cert;   // PEM client certificate (mutual TLS), with key
  std::string key;    // PEM private key of cert (a private file: auth/secret_file.h)
  std::string flag_prefix = "--";
};

// TLS credentials when the options ask for TLS, else insecure ones.
// INVALID_ARGUMENT when cert and key are not given together; the read errors
// of the files name the flag and the path.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientChannelCredentials(const ClientTlsOptions& options);

// The key in a key file (the first `KEY` or `NAME KEY` line; blank lines and
// '#' comments skipped; a private file). `flag` names the flag in errors.
absl::StatusOr<std::string> ReadClientApiKey(const std::string& path, absl::string_view flag);

}  // namespace tpserve
