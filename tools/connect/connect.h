// How the command-line clients (tpserve-client, tpserve-bench) reach a
// coordinator's public API: the flags they share and the channel they make.
//
// Flags (defined in connect.cc, listed by each tool's --help through
// kConnectFlagsFile): --server HOST:PORT (default 127.0.0.1:50051),
// --api-key-file FILE (default $TPSERVE_API_KEY), --tls, --tls-ca PEM,
// --tls-cert PEM, --tls-key PEM.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace tpserve {

// __FILE__ of connect.cc, for InitToolUsage's list of flag files.
extern const char kConnectFlagsFile[];

struct ClientConnection {
  std::string server;                     // --server
  std::shared_ptr<grpc::Channel> channel;  // plain text, or TLS when asked
  std::string api_key;                    // "" = none
};

// Reads the API key and the TLS files the flags name and makes the channel
// (it connects lazily). INVALID_ARGUMENT / NOT_FOUND naming the flag when a
// file is missing, empty or a flag needs another.
absl::StatusOr<ClientConnection> ConnectFromFlags();

// Adds `authorization: Bearer KEY` to a call when the connection has a key.
void AddApiKey(const ClientConnection& connection, grpc::ClientContext& context);

// "INVALID_ARGUMENT" and so on.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace tpserve
