#include "auth/tls_credentials.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "auth/secret_file.h"

namespace tpserve {

namespace {

// A PEM file's text; NOT_FOUND / INVALID_ARGUMENT naming `flag` and the path.
absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file (no -----BEGIN line)"));
  }
  return text;
}

absl::Status CheckPair(const TlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.cert_flag, " and ", files.key_flag, " go together: give both PEM files, or neither"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files) {
  if (absl::Status pair = CheckPair(files); !pair.ok()) return pair;
  if (files.cert.empty()) {
    if (!files.ca.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(files.ca_flag, " needs ", files.cert_flag, " and ",
                                                     files.key_flag, " (mutual TLS is TLS)"));
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> key = ReadSecretFile(files.key, files.key_flag);
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> chain = ReadPem(files.cert, files.cert_flag);
  if (!chain.ok()) return chain.status();
  pair.private_key = *std::move(key);
  pair.cert_chain = *std::move(chain);
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> roots = ReadPem(files.ca, files.ca_flag);
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *std::move(roots);
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsFiles& files, bool tls) {
  if (absl::Status pair = CheckPair(files); !pair.ok()) return pair;
  if (!tls && !files.any()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> roots = ReadPem(files.ca, files.ca_flag);
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *std::move(roots);
  }
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> chain = ReadPem(files.cert, files.cert_flag);
    if (!chain.ok()) return chain.status();
    absl::StatusOr<std::string> key = ReadSecretFile(files.key, files.key_flag);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(chain);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace tpserve
