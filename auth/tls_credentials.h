// gRPC credentials from PEM files, one way for every endpoint: the public API
// (coordinator, tpserve-client), the worker port (coordinator, tpserve-worker).
// Errors name the flag that gave the file and say what is wrong with it.
//
// A separate library (tpserve_auth_grpc) from tpserve_auth, which links no gRPC.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"

namespace tpserve {

// The PEM files of one side of a connection and the flags that named them.
struct TlsFiles {
  std::string cert;  // this side's certificate chain
  std::string key;   // its private key (read as a secret: owner-only, never logged)
  std::string ca;    // the CA bundle the peer's certificate must chain to
  std::string cert_flag = "--tls-cert";
  std::string key_flag = "--tls-key";
  std::string ca_flag = "--tls-ca";

  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// A server: TLS with `cert` and `key` (both or neither); with `ca` too, every
// client must present a certificate it signed (mutual TLS). Plain text when
// no file is given. INVALID_ARGUMENT for a half pair or a CA without a
// certificate; NOT_FOUND / INVALID_ARGUMENT for a file that cannot be read
// or is not PEM.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files);

// A client: TLS when `tls` or any file is given; the server's certificate is
// checked against `ca` (default: the system's roots); `cert` and `key` (both
// or neither) are its client certificate for mutual TLS. Plain text otherwise.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsFiles& files,
                                                                                 bool tls = false);

}  // namespace tpserve
