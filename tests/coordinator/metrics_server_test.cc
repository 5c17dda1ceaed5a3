// GET /metrics over real HTTP on the loopback (coordinator/metrics_server.h).
#include "coordinator/metrics_server.h"

#include <httplib.h>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"

namespace tpserve {
namespace {

int Port(const std::string& address) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) << address;
  return port;
}

TEST(MetricsServer, ServesTheRegistryAsPrometheusText) {
  MetricsRegistry registry;
  registry.Counter("t:hits_total", "Hits.").Increment(2);
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->address().rfind("127.0.0.1:", 0), 0u) << (*server)->address();
  httplib::Client client("127.0.0.1", Port((*server)->address()));
  httplib::Result first = client.Get("/metrics");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(first->body, registry.Render());
  registry.Counter("t:hits_total", "Hits.").Increment();
  EXPECT_NE(client.Get("/metrics")->body.find("t:hits_total 3\n"), std::string::npos);
  EXPECT_EQ(client.Get("/")->status, 404);
}

// A scraper that keeps its connection open and idle does not hold the
// endpoint from another (cpp-httplib's one handler thread was held by it).
TEST(MetricsServer, AnIdleKeepAliveScraperDoesNotBlockAnother) {
  MetricsRegistry registry;
  registry.Counter("t:hits_total", "Hits.").Increment();
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client idle("127.0.0.1", Port((*server)->address()));
  idle.set_keep_alive(true);
  ASSERT_TRUE(idle.Get("/metrics"));  // its connection stays open
  httplib::Client other("127.0.0.1", Port((*server)->address()));
  other.set_read_timeout(2, 0);
  httplib::Result r = other.Get("/metrics");
  ASSERT_TRUE(r) << "the second scraper waited";
  EXPECT_EQ(r->status, 200);
}

TEST(MetricsServer, StopsRightAfterStarting) {
  MetricsRegistry registry;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("0", registry);  // PORT: loopback
    ASSERT_TRUE(server.ok()) << server.status();
  }  // each destroyed at once: must not hang
}

TEST(MetricsServer, BadAddressesNameTheFlag) {
  MetricsRegistry registry;
  for (const char* listen : {"", "host:", "127.0.0.1:99999", "127.0.0.1:http"}) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(listen, registry);
    ASSERT_FALSE(server.ok()) << listen;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << listen;
    EXPECT_NE(server.status().message().find("--metrics-listen"), std::string::npos);
  }
  absl::StatusOr<std::unique_ptr<MetricsServer>> taken = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(taken.ok());
  absl::StatusOr<std::unique_ptr<MetricsServer>> again = MetricsServer::Start((*taken)->address(), registry);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << "a port in use";
}

}  // namespace
}  // namespace tpserve
