#include "client_channel/channel.h"

#include <fstream>
#include <iterator>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "auth/secret_file.h"

namespace tpserve {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientChannelCredentials(const ClientTlsOptions& options) {
  const std::string& p = options.flag_prefix;
  if (options.cert.empty() != options.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(p, "tls-cert and ", p, "tls-key go together"));
  }
  if (!options.tls && options.ca.empty() && options.cert.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!options.ca.empty()) {
    absl::StatusOr<std::string> pem = ReadPem(options.ca, absl::StrCat(p, "tls-ca"));
    if (!pem.ok()) return pem.status();
    ssl.pem_root_certs = *pem;
  }
  if (!options.cert.empty()) {
    absl::StatusOr<std::string> chain = ReadPem(options.cert, absl::StrCat(p, "tls-cert"));
    if (!chain.ok()) return chain.status();
    absl::StatusOr<std::string> key = ReadSecretFile(options.key, absl::StrCat(p, "tls-key"));
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *chain;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::string> ReadClientApiKey(const std::string& path, absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadSecretFile(path, flag);
  if (!text.ok()) return text.status();
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    return std::string(words.back());
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, " holds no key"));
}

}  // namespace tpserve
