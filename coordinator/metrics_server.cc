#include "coordinator/metrics_server.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httpd/server.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                                    const MetricsRegistry& registry) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "127.0.0.1" : listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  if (!absl::SimpleAtoi(colon == std::string::npos ? listen : listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535 || host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-listen: \"", listen, "\" is not PORT or HOST:PORT; e.g. --metrics-listen 127.0.0.1:9400"));
  }
  httpd::ServerOptions options{.host = host, .port = port};
  options.name = "--metrics-listen";
  options.limits.max_connections = 64;  // scrapers, not clients
  options.limits.io_threads = 1;
  std::vector<httpd::Route> routes;
  routes.push_back({"GET", "/metrics",
                    [&registry](std::shared_ptr<httpd::Exchange> exchange) {
                      exchange->Respond({.content_type = "text/plain; version=0.0.4; charset=utf-8",
                                         .body = registry.Render()});
                    },
                    /*authorize=*/false});
  std::unique_ptr<MetricsServer> out(new MetricsServer());
  out->server_ = std::make_unique<httpd::Server>(std::move(options), std::move(routes));
  if (absl::Status s = out->server_->Bind(); !s.ok()) {
    if (s.code() != absl::StatusCode::kUnavailable) return s;
    return absl::UnavailableError(absl::StrCat(s.message(), "; pick another --metrics-listen"));
  }
  out->address_ = absl::StrCat(host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, ":",
                               out->server_->port());
  out->thread_ = std::thread([server = out->server_.get()] { server->Run(); });
  return out;
}

MetricsServer::~MetricsServer() {
  server_->Stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tpserve
