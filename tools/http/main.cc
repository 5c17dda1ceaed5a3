// tpserve-http: OpenAI-compatible HTTP in front of a tpserve-coordinator, as a
// client of its public gRPC API (http/server.h). Stateless: run it beside the
// coordinator or anywhere that reaches it.
//
//   tpserve-http --server 127.0.0.1:50051 [--listen 127.0.0.1:8000]
//       [--api-key-file FILE]  bearer keys HTTP clients must send (auth/api_keys.h format)
//       [--max-body-bytes N] [--max-connections N] [--io-threads N]
//       [--header-timeout D] [--body-timeout D] [--idle-timeout D] [--write-timeout D]
//       [--server-api-key-file FILE] [--server-tls] [--server-tls-ca PEM]
//       [--server-tls-cert PEM --server-tls-key PEM]   how to reach the coordinator
//
// Prints "tpserve-http: coordinator ADDR; listening on HOST:PORT" once it accepts connections;
// SIGTERM/SIGINT stop it (open streams are cut).
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/time.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "auth/api_keys.h"
#include "base/flag_spelling.h"
#include "base/tool_usage.h"
#include "auth/tls_credentials.h"
#include "health.grpc.pb.h"
#include "http/server.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "the coordinator's public API, HOST:PORT");
ABSL_FLAG(std::string, listen, "127.0.0.1:8000", "HTTP address HOST:PORT (port 0: any free port)");
ABSL_FLAG(std::string, api_key_file, "",
          "bearer keys HTTP clients must send (lines `NAME KEY` or `KEY`, chmod 600); unset: no keys");
ABSL_FLAG(int64_t, max_body_bytes, 1 << 20, "largest request body, chunked or not; larger ones get 413");
ABSL_FLAG(int64_t, max_header_bytes, 16 << 10, "largest request line plus headers; larger ones get 431");
ABSL_FLAG(int32_t, max_connections, 1024,
          "connections open at once; past it a new one closes the oldest idle one, else gets 503");
ABSL_FLAG(int32_t, io_threads, 2, "threads of the event loop (no request holds one; streams included)");
ABSL_FLAG(absl::Duration, header_timeout, absl::Seconds(10),
          "a request's line and headers must arrive within this of their first byte: else 408");
ABSL_FLAG(absl::Duration, body_timeout, absl::Seconds(30), "a request's body must arrive within this: else 408");
ABSL_FLAG(absl::Duration, idle_timeout, absl::Seconds(30), "a keep-alive connection idle this long is closed");
ABSL_FLAG(absl::Duration, write_timeout, absl::Seconds(30),
          "a client that takes none of a response (or of a stream) for this long is cut off and its request ended");
ABSL_FLAG(std::string, server_api_key_file, "",
          "the API key to send to the coordinator (its first `KEY` or `NAME KEY` line)");
ABSL_FLAG(bool, server_tls, false, "reach the coordinator over TLS (implied by --server-tls-ca / -cert)");
ABSL_FLAG(std::string, server_tls_ca, "", "PEM CA bundle that signed the coordinator's certificate");
ABSL_FLAG(std::string, server_tls_cert, "", "PEM client certificate, for a coordinator with --tls-client-ca");
ABSL_FLAG(std::string, server_tls_key, "", "PEM private key of --server-tls-cert");

namespace {

int Fail(absl::string_view message) {
  std::fprintf(stderr, "tpserve-http: %.*s\n", static_cast<int>(message.size()), message.data());
  return 2;
}

// HOST and PORT of --listen, or an error naming it.
absl::Status SplitListen(const std::string& listen, tpserve::http::ServerOptions& options) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: \"", listen, "\" is not HOST:PORT"));
  }
  options.host = listen.substr(0, colon);
  if (options.host.size() > 2 && options.host.front() == '[') {  // [::1]
    options.host = options.host.substr(1, options.host.size() - 2);
  }
  options.port = port;
  return absl::OkStatus();
}

absl::Status LimitsFromFlags(tpserve::httpd::ServerLimits& limits) {
  auto at_least_one = [](int64_t v, absl::string_view flag) {
    return v >= 1 ? absl::OkStatus() : absl::InvalidArgumentError(absl::StrCat(flag, " must be at least 1"));
  };
  for (auto [value, flag] : {std::pair<int64_t, absl::string_view>{absl::GetFlag(FLAGS_max_body_bytes), "--max-body-bytes"},
                             {absl::GetFlag(FLAGS_max_header_bytes), "--max-header-bytes"},
                             {absl::GetFlag(FLAGS_max_connections), "--max-connections"},
                             {absl::GetFlag(FLAGS_io_threads), "--io-threads"}}) {
    if (absl::Status s = at_least_one(value, flag); !s.ok()) return s;
  }
  limits.max_body_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_body_bytes));
  limits.max_header_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_header_bytes));
  limits.max_connections = static_cast<size_t>(absl::GetFlag(FLAGS_max_connections));
  limits.io_threads = absl::GetFlag(FLAGS_io_threads);
  for (auto [value, flag] : {std::pair<absl::Duration, absl::string_view>{absl::GetFlag(FLAGS_header_timeout),
                                                                          "--header-timeout"},
                             {absl::GetFlag(FLAGS_body_timeout), "--body-timeout"},
                             {absl::GetFlag(FLAGS_idle_timeout), "--idle-timeout"},
                             {absl::GetFlag(FLAGS_write_timeout), "--write-timeout"}}) {
    if (value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " must be positive, e.g. 10s"));
    }
  }
  limits.header_timeout = absl::GetFlag(FLAGS_header_timeout);
  limits.body_timeout = absl::GetFlag(FLAGS_body_timeout);
  limits.idle_timeout = absl::GetFlag(FLAGS_idle_timeout);
  limits.write_timeout = absl::GetFlag(FLAGS_write_timeout);
  return absl::OkStatus();
}

absl::StatusOr<tpserve::http::ServerOptions> OptionsFromFlags(const std::shared_ptr<grpc::Channel>& channel) {
  tpserve::http::ServerOptions options;
  if (absl::Status s = SplitListen(absl::GetFlag(FLAGS_listen), options); !s.ok()) return s;
  if (absl::Status s = LimitsFromFlags(options.limits); !s.ok()) return s;
  if (!absl::GetFlag(FLAGS_api_key_file).empty()) {
    absl::StatusOr<tpserve::ApiKeys> keys = tpserve::ApiKeys::FromFile(absl::GetFlag(FLAGS_api_key_file));
    if (!keys.ok()) return keys.status();
    options.api_keys = *std::move(keys);
  }
  if (!absl::GetFlag(FLAGS_server_api_key_file).empty()) {
    absl::StatusOr<std::string> key =
        tpserve::ReadClientApiKey(absl::GetFlag(FLAGS_server_api_key_file), "--server-api-key-file");
    if (!key.ok()) return key.status();
    options.coordinator_api_key = *std::move(key);
  }
  auto health = std::shared_ptr<grpc::health::v1::Health::Stub>(grpc::health::v1::Health::NewStub(channel));
  options.healthy = [health](std::function<void(bool)> done) {
    struct Check {
      grpc::ClientContext context;
      grpc::health::v1::HealthCheckRequest request;
      grpc::health::v1::HealthCheckResponse response;
    };
    auto check = std::make_shared<Check>();
    check->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    health->async()->Check(&check->context, &check->request, &check->response,
                           [check, done = std::move(done)](grpc::Status s) {
                             done(s.ok() && check->response.status() ==
                                                grpc::health::v1::HealthCheckResponse::SERVING);
                           });
  };
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  tpserve::InitToolUsage(argc, argv,
      "tpserve-http --server HOST:PORT [--listen HOST:PORT] [flags]: the OpenAI-compatible HTTP API\n"
      "(/v1/chat/completions, /v1/completions, /v1/models, /tokenize, /detokenize, /health) in front of a\n"
      "tpserve-coordinator, as a client of its public gRPC API.\n"
      "\n"
      "Examples:\n"
      "  tpserve-http --server 127.0.0.1:50051 --listen 127.0.0.1:8000\n"
      "  tpserve-http --server coordinator:50051 --server-tls-ca ca.pem --listen 0.0.0.0:8000 \\\n"
      "      --api-key-file /etc/tpserve/http-keys\n",
      {__FILE__});
  std::vector<std::string> args = tpserve::UnderscoreFlagNames(argc, argv);
  std::vector<char*> pointers;
  for (std::string& a : args) pointers.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(pointers.size()), pointers.data());

  // Signals are taken by one thread (sigwait); the others never see them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const tpserve::TlsFiles tls{.cert = absl::GetFlag(FLAGS_server_tls_cert),
                              .key = absl::GetFlag(FLAGS_server_tls_key),
                              .ca = absl::GetFlag(FLAGS_server_tls_ca),
                              .cert_flag = "--server-tls-cert",
                              .key_flag = "--server-tls-key",
                              .ca_flag = "--server-tls-ca"};
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      tpserve::MakeChannelCredentials(tls, absl::GetFlag(FLAGS_server_tls));
  if (!credentials.ok()) return Fail(credentials.status().message());
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(absl::GetFlag(FLAGS_server), *credentials);
  absl::StatusOr<tpserve::http::ServerOptions> options = OptionsFromFlags(channel);
  if (!options.ok()) return Fail(options.status().message());

  const std::string host = options->host;
  tpserve::http::Server server(channel, *std::move(options));
  if (absl::Status s = server.Bind(); !s.ok()) return Fail(s.message());
  std::atomic<bool> signalled = false;
  std::thread signals([&server, &signalled, set] {
    int sig = 0;
    sigwait(&set, &sig);
    signalled = true;
    std::fprintf(stderr, "tpserve-http: got %s; stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.Stop();
  });
  std::fprintf(stderr, "tpserve-http: coordinator %s; listening on %s:%d\n", absl::GetFlag(FLAGS_server).c_str(),
               host.c_str(), server.port());
  server.Run();
  if (!signalled) {  // the server failed by itself: nobody will wake the signal thread
    signals.detach();
    return 1;
  }
  signals.join();
  return 0;
}
