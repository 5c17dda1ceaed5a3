#include "coordinator/metrics_server.h"

#include <sys/socket.h>

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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
  std::unique_ptr<MetricsServer> out(new MetricsServer());
  out->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *out->server_;
  server.new_task_queue = [] { return new httplib::ThreadPool(1); };  // one scrape at a time is plenty
  // Exclusive, as the public port: httplib's default adds SO_REUSEPORT, which
  // would let a second process share the port and take some scrapes.
  server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.Get("/metrics", [&registry](const httplib::Request&, httplib::Response& response) {
    response.set_content(registry.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen: cannot listen on ", listen,
                                               " (is another server using that port?); pick another"));
  }
  out->address_ = absl::StrCat(host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, ":", bound);
  out->thread_ = std::thread([&server, done = &out->done_] {
    server.listen_after_bind();
    done->store(true);
  });
  return out;
}

MetricsServer::~MetricsServer() {
  // httplib's stop() does nothing before the loop runs (is_running): repeat
  // it until the loop has ended, so a server stopped at once still stops.
  while (thread_.joinable() && !done_.load()) {
    server_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace tpserve
