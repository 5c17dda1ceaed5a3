// The coordinator's Prometheus endpoint: GET /metrics answers the registry
// in the text exposition format (version 0.0.4), over plain HTTP on one event
// loop thread of its own (httpd/server.h: connections, deadlines and sizes
// bounded; an idle scraper's keep-alive connection holds no thread). Off
// unless --metrics-listen is given; it serves only figures, never requests,
// and binds the loopback unless told otherwise.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "coordinator/metrics_registry.h"

namespace tpserve::httpd {
class Server;
}

namespace tpserve {

class MetricsServer {
 public:
  // Listens on `listen` ("PORT" = 127.0.0.1:PORT, or "HOST:PORT"; port 0 picks
  // a free one) and serves `registry` (must outlive the server). UNAVAILABLE
  // naming --metrics-listen when it cannot bind, INVALID_ARGUMENT when
  // `listen` is no address.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                              const MetricsRegistry& registry);
  ~MetricsServer();  // stops serving

  const std::string& address() const { return address_; }  // HOST:PORT it listens on

 private:
  MetricsServer() = default;
  std::unique_ptr<httpd::Server> server_;
  std::thread thread_;
  std::string address_;
};

}  // namespace tpserve
