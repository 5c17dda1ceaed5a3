#include "worker_service/dial_diagnosis.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {
namespace {

constexpr int kStepTimeoutMs = 2000;  // connect, handshake, and the wait for a late alert

struct HostPort {
  std::string host;  // without IPv6 brackets
  std::string port;
};

std::optional<HostPort> SplitAddress(const std::string& address) {
  if (address.starts_with("unix:")) return std::nullopt;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return HostPort{host, address.substr(colon + 1)};
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 || inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

// A TCP connection to the coordinator (-1 when none could be made), with
// kStepTimeoutMs for the connect and for every later read and write.
int ConnectTcp(const HostPort& target) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(target.host.c_str(), target.port.c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int error = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
        socklen_t size = sizeof(error);
        error = poll(&p, 1, kStepTimeoutMs) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0
                    ? error
                    : ETIMEDOUT;
      }
    }
    if (error != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval limit{.tv_sec = kStepTimeoutMs / 1000, .tv_usec = (kStepTimeoutMs % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  return fd;
}

// OpenSSL writes to the socket with write(2): a coordinator that hung up
// must not end the worker with SIGPIPE. Blocked on this thread while the
// probe runs; one raised meanwhile is taken before the mask is restored.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    const timespec now{};
    while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_;
  sigset_t old_;
};

struct SslDeleter {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
  void operator()(SSL* ssl) const { SSL_free(ssl); }
  void operator()(X509* cert) const { X509_free(cert); }
};

// OpenSSL's queued errors as one string (and the queue emptied).
std::string TakeOpenSslErrors() {
  std::vector<std::string> parts;
  while (const unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    parts.push_back(reason != nullptr ? reason : absl::StrCat("error ", e));
  }
  return absl::StrJoin(parts, "; ");
}

// Whether OpenSSL's last queued error is an alert the peer sent (a TLS server
// that refused us), rather than bytes that were not TLS at all.
bool LastErrorIsPeerAlert() {
  const unsigned long e = ERR_peek_last_error();
  const int reason = ERR_GET_REASON(e);
  return ERR_GET_LIB(e) == ERR_LIB_SSL && reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256;
}

std::string NameOf(X509_NAME* name) {
  if (name == nullptr) return "?";
  char buffer[512];
  X509_NAME_oneline(name, buffer, sizeof(buffer));
  return buffer;
}

// "DNS:head, IP:127.0.0.1": the subjectAltName entries a certificate carries.
std::string AltNames(X509* cert) {
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return "";
  std::vector<std::string> out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type == GEN_DNS) {
      const auto* text = reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName));
      out.push_back(absl::StrCat("DNS:", std::string(text, static_cast<size_t>(ASN1_STRING_length(n->d.dNSName)))));
    } else if (n->type == GEN_IPADD) {
      const int length = ASN1_STRING_length(n->d.iPAddress);
      char text[INET6_ADDRSTRLEN] = "?";
      inet_ntop(length == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(n->d.iPAddress), text, sizeof(text));
      out.push_back(absl::StrCat("IP:", text));
    }
  }
  GENERAL_NAMES_free(names);
  return absl::StrJoin(out, ", ");
}

// One TLS handshake with the coordinator: the problem it shows, or "" when
// TLS is not the problem.
// A client context for the probe: the worker's roots and certificate when it
// dials with TLS, verification judged after the handshake (SSL_get_verify_result),
// so one handshake shows both the server's certificate and our own's fate.
// Null when the files cannot be read (checked at start-up; gRPC will say).
std::unique_ptr<SSL_CTX, SslDeleter> ProbeContext(const DialSettings& dial) {
  std::unique_ptr<SSL_CTX, SslDeleter> ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return nullptr;
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  if (!dial.tls) return ctx;
  const bool roots = dial.ca.empty() ? SSL_CTX_set_default_verify_paths(ctx.get()) == 1
                                     : SSL_CTX_load_verify_locations(ctx.get(), dial.ca.c_str(), nullptr) == 1;
  if (!roots) return nullptr;
  if (!dial.cert.empty() && (SSL_CTX_use_certificate_chain_file(ctx.get(), dial.cert.c_str()) != 1 ||
                             SSL_CTX_use_PrivateKey_file(ctx.get(), dial.key.c_str(), SSL_FILETYPE_PEM) != 1)) {
    return nullptr;
  }
  return ctx;
}

// What to do about a refused client certificate, naming the CAs the
// coordinator said it accepts (its --worker-tls-ca) when it said.
std::string RefusedCertificate(SSL* ssl, const DialSettings& dial, const std::string& at, const std::string& how) {
  std::vector<std::string> cas;
  if (const STACK_OF(X509_NAME)* names = SSL_get_client_CA_list(ssl)) {
    for (int i = 0; i < sk_X509_NAME_num(names); ++i) cas.push_back(NameOf(sk_X509_NAME_value(names, i)));
  }
  return absl::StrCat(at, "the coordinator refused this worker's client certificate (", how,
                      "); it requires one signed by its --worker-tls-ca",
                      cas.empty() ? "" : absl::StrCat(" (", absl::StrJoin(cas, ", "), ")"), ": ",
                      dial.cert.empty() ? std::string("give --tls-cert and --tls-key")
                                        : absl::StrCat("--tls-cert ", dial.cert, " is not signed by it"));
}

// After a completed handshake: what is wrong with the coordinator's
// certificate as `name` verifies it, or "".
std::string JudgeServerCertificate(SSL* ssl, const DialSettings& dial, const std::string& name,
                                   const std::string& at) {
  const long verify = SSL_get_verify_result(ssl);
  std::unique_ptr<X509, SslDeleter> peer(SSL_get1_peer_certificate(ssl));
  if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
    const std::string names = peer ? AltNames(peer.get()) : "";
    return absl::StrCat(at, "the coordinator's certificate is for ",
                        names.empty() ? absl::StrCat(NameOf(peer ? X509_get_subject_name(peer.get()) : nullptr),
                                                     " (no subjectAltName)")
                                      : names,
                        ", not ", name, "; dial a name it carries (--coordinator), name one with --tls-server-name, "
                        "or give the certificate subjectAltName=", IsIpLiteral(name) ? "IP:" : "DNS:", name);
  }
  if (verify == X509_V_OK) return "";
  return absl::StrCat(
      at, "the coordinator's certificate (", NameOf(peer ? X509_get_subject_name(peer.get()) : nullptr),
      ", issued by ", NameOf(peer ? X509_get_issuer_name(peer.get()) : nullptr), ") does not verify against ",
      dial.ca.empty() ? std::string("the system's CA certificates") : absl::StrCat("--tls-ca ", dial.ca), ": ",
      X509_verify_cert_error_string(verify),
      "; give --tls-ca the CA certificate that signed the coordinator's --worker-tls-cert");
}

// TLS 1.3: the server judges the client certificate after the client's
// Finished, so a refusal arrives as an alert on the first read. Silence
// until the timeout means the coordinator took the handshake ("").
std::string JudgeFirstRead(SSL* ssl, const DialSettings& dial, bool cert_requested, const std::string& at) {
  char byte = 0;
  errno = 0;
  const int read = SSL_read(ssl, &byte, 1);
  const int error = SSL_get_error(ssl, read);
  if (read <= 0 && error == SSL_ERROR_SSL && LastErrorIsPeerAlert()) {
    return RefusedCertificate(ssl, dial, at, TakeOpenSslErrors());
  }
  const bool eof = error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && errno == 0) ||
                   (error == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_last_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
  ERR_clear_error();
  if (read > 0 || !eof) return "";
  // gRPC's server hangs up without an alert when it refuses the certificate.
  if (cert_requested) return RefusedCertificate(ssl, dial, at, "it closed the connection after the handshake");
  return absl::StrCat(at, "the coordinator closed the connection right after the handshake");
}

std::string ProbeTls(const DialSettings& dial, const HostPort& target, int fd) {
  const std::string at = absl::StrCat("the TLS handshake with the coordinator at ", dial.address, " failed: ");
  std::unique_ptr<SSL_CTX, SslDeleter> ctx = ProbeContext(dial);
  if (!ctx) return "";
  // Called when the server asks for a client certificate (whether or not we have one).
  bool cert_requested = false;
  SSL_CTX_set_cert_cb(
      ctx.get(), [](SSL*, void* requested) { return *static_cast<bool*>(requested) = true, 1; }, &cert_requested);
  std::unique_ptr<SSL, SslDeleter> ssl(SSL_new(ctx.get()));
  if (!ssl) return "";
  SSL_set_fd(ssl.get(), fd);
  const std::string name = dial.server_name.empty() ? target.host : dial.server_name;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
  if (IsIpLiteral(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl.get(), name.c_str());
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
  }
  ERR_clear_error();
  const int connected = SSL_connect(ssl.get());
  if (!dial.tls) {
    // A plain-text worker: does the port speak TLS? A ServerHello, or an
    // alert refusing us, says it does.
    const bool speaks_tls = connected == 1 || LastErrorIsPeerAlert();
    ERR_clear_error();
    if (!speaks_tls) return "";
    return absl::StrCat("the coordinator at ", dial.address,
                        " expects a TLS handshake on its worker port, and this worker dialled in plain text: give "
                        "--tls-ca (the CA certificate that signed the coordinator's --worker-tls-cert), and "
                        "--tls-cert and --tls-key if it requires worker certificates (--worker-tls-ca)");
  }
  if (connected != 1) {
    const bool alert = LastErrorIsPeerAlert();
    const std::string why = TakeOpenSslErrors();
    if (alert && cert_requested) return RefusedCertificate(ssl.get(), dial, at, why);  // TLS 1.2: inside the handshake
    if (alert) return absl::StrCat(at, "the coordinator sent a TLS alert (", why, ")");
    return absl::StrCat(at, "its worker port does not speak TLS (", why.empty() ? "the connection closed" : why,
                        "); drop --tls-ca, --tls-cert and --tls-key, or give the coordinator --worker-tls-cert "
                        "and --worker-tls-key");
  }
  if (std::string why = JudgeServerCertificate(ssl.get(), dial, name, at); !why.empty()) return why;
  return JudgeFirstRead(ssl.get(), dial, cert_requested, at);
}

}  // namespace

std::string DiagnoseDialFailure(const DialSettings& dial, const std::string& grpc_error) {
  const std::optional<HostPort> target = SplitAddress(dial.address);
  if (!target) return "";
  const ScopedSigpipeBlock no_sigpipe;
  const int fd = ConnectTcp(*target);
  if (fd < 0) return "";
  std::string why = ProbeTls(dial, *target, fd);
  close(fd);
  if (!why.empty()) return why;
  return absl::StrCat("the coordinator at ", dial.address, " accepted a connection, but the gRPC channel failed (",
                      grpc_error.empty() ? "no error given" : grpc_error, ")");
}

}  // namespace tpserve
