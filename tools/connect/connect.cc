#include "tools/connect/connect.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "auth/api_keys.h"
#include "auth/tls_credentials.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "coordinator address HOST:PORT");
ABSL_FLAG(std::string, api_key_file, "",
          "file holding the API key to send (its first `KEY` or `NAME KEY` line; default: $TPSERVE_API_KEY)");
ABSL_FLAG(bool, tls, false, "connect with TLS (implied by --tls-ca and --tls-cert)");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA bundle that signed the server's certificate (default: the system's)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for a server with --tls-client-ca");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");

namespace tpserve {

const char kConnectFlagsFile[] = __FILE__;

namespace {

// The API key: --api-key-file, else $TPSERVE_API_KEY, else "".
absl::StatusOr<std::string> LoadApiKey() {
  const std::string path = absl::GetFlag(FLAGS_api_key_file);
  if (path.empty()) {
    const char* env = std::getenv("TPSERVE_API_KEY");
    return std::string(env == nullptr ? "" : env);
  }
  return ReadClientApiKey(path, "--api-key-file");
}

// TLS when --tls, --tls-ca or --tls-cert asks for it, else plain text.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials() {
  const TlsFiles tls{.cert = absl::GetFlag(FLAGS_tls_cert), .key = absl::GetFlag(FLAGS_tls_key),
                     .ca = absl::GetFlag(FLAGS_tls_ca)};
  return MakeChannelCredentials(tls, absl::GetFlag(FLAGS_tls));
}

}  // namespace

absl::StatusOr<ClientConnection> ConnectFromFlags() {
  ClientConnection connection;
  connection.server = absl::GetFlag(FLAGS_server);
  absl::StatusOr<std::string> key = LoadApiKey();
  if (!key.ok()) return key.status();
  connection.api_key = *key;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = ChannelCredentials();
  if (!credentials.ok()) return credentials.status();
  connection.channel = grpc::CreateChannel(connection.server, *credentials);
  return connection;
}

void AddApiKey(const ClientConnection& connection, grpc::ClientContext& context) {
  if (!connection.api_key.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", connection.api_key));
}

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

}  // namespace tpserve
