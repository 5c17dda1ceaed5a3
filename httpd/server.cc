#include "httpd/server.h"

#include <algorithm>
#include <thread>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "httpd/connection.h"
#include "httpd/core.h"

namespace tpserve::httpd {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;

}  // namespace

absl::string_view Request::Header(absl::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (absl::EqualsIgnoreCase(n, name)) return v;
  }
  return {};
}

Server::Core::Core(ServerOptions o, std::vector<Route> r) : options(std::move(o)), routes(std::move(r)) {}

const Route* Server::Core::Find(const std::string& method, const std::string& path, std::string* allow) const {
  std::vector<std::string> methods;
  for (const Route& route : routes) {
    if (route.path != path) continue;
    if (route.method == method) return &route;
    methods.push_back(route.method);
  }
  *allow = absl::StrJoin(methods, ", ");
  return nullptr;
}

Response Server::Core::Error(int status, const std::string& message) const {
  if (options.error_response) return options.error_response(status, message);
  return Response{.status = status, .content_type = "text/plain; charset=utf-8", .body = message + "\n"};
}

Server::Core::Registry::iterator Server::Core::Register() {
  absl::MutexLock lock(&mu);
  ++open;
  return connections.emplace(connections.end());
}

void Server::Core::Bind(Registry::iterator it, std::weak_ptr<Connection> connection) {
  absl::MutexLock lock(&mu);
  *it = std::move(connection);
}

void Server::Core::Unregister(Registry::iterator it) {
  absl::MutexLock lock(&mu);
  connections.erase(it);
  --open;
}

size_t Server::Core::Open() const {
  absl::MutexLock lock(&mu);
  return open;
}

void Server::Core::Accept() {
  // The handlers hold the core by pointer: they run only while `io`, a member, does.
  acceptor.async_accept(asio::make_strand(io), [core = this](const error_code& ec, tcp::socket socket) {
    if (!core->acceptor.is_open()) return;
    if (!ec) {
      core->Admit(std::move(socket));
      return core->Accept();
    }
    // Out of file descriptors, say: wait a moment rather than spin.
    core->accept_retry.expires_after(std::chrono::milliseconds(50));
    core->accept_retry.async_wait([core](const error_code&) {
      if (core->acceptor.is_open()) core->Accept();
    });
  });
}

void Server::Core::Admit(tcp::socket socket) {
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // server-sent events go out as they are written
  bool refuse = false;
  {
    absl::MutexLock lock(&mu);
    if (stopping) return;
    refuse = open >= options.limits.max_connections;
  }
  if (refuse) refuse = !EvictOldest();
  const Registry::iterator slot = Register();
  auto connection = std::make_shared<Connection>(std::move(socket), shared_from_this(), slot);
  Bind(slot, connection);
  connection->Post([refuse](Connection& c) { c.Start(refuse); });
}

bool Server::Core::EvictOldest() {
  std::shared_ptr<Connection> victim;
  {
    absl::MutexLock lock(&mu);
    for (const std::weak_ptr<Connection>& weak : connections) {
      std::shared_ptr<Connection> c = weak.lock();
      if (c != nullptr && c->Evictable()) {
        victim = std::move(c);
        break;
      }
    }
  }
  if (victim == nullptr) return false;
  victim->Close();
  return true;
}

void Server::Core::CloseAll() {
  std::vector<std::shared_ptr<Connection>> all;
  {
    absl::MutexLock lock(&mu);
    stopping = true;
    for (const std::weak_ptr<Connection>& weak : connections) {
      if (std::shared_ptr<Connection> c = weak.lock()) all.push_back(std::move(c));
    }
  }
  for (const std::shared_ptr<Connection>& c : all) c->Close();
}

Server::Server(ServerOptions options, std::vector<Route> routes)
    : core_(std::make_shared<Core>(std::move(options), std::move(routes))) {}

Server::~Server() { Stop(); }

absl::Status Server::Bind() {
  Core& c = *core_;
  auto fail = [&](absl::StatusCode code, absl::string_view why) {
    return absl::Status(code, absl::StrCat(c.options.name, ": cannot listen on ", c.options.host, ":", c.options.port,
                                           " (", why, ")"));
  };
  error_code ec;
  asio::ip::address address = asio::ip::make_address(c.options.host, ec);
  if (ec) {  // a name: its first address
    tcp::resolver resolver(c.io);
    auto found = resolver.resolve(c.options.host, std::to_string(c.options.port), ec);
    if (ec || found.empty()) return fail(absl::StatusCode::kInvalidArgument, "not an address of this host");
    address = found.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(c.options.port));
  c.acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only: a restarted server binds at once, and no second process
  // can share the port (SO_REUSEPORT would let it take some connections).
  if (!ec) c.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) c.acceptor.bind(endpoint, ec);
  if (!ec) c.acceptor.listen(c.options.limits.backlog, ec);
  if (ec == asio::error::address_in_use) return fail(absl::StatusCode::kUnavailable, "in use by another server");
  if (ec) return fail(absl::StatusCode::kInvalidArgument, ec.message());
  c.port = c.acceptor.local_endpoint().port();
  return absl::OkStatus();
}

int Server::port() const { return core_->port; }

size_t Server::open_connections() const { return core_->Open(); }

void Server::Run() {
  Core& c = *core_;
  {
    absl::MutexLock lock(&c.mu);
    if (c.stopping) return;
    c.work.emplace(c.io.get_executor());
  }
  asio::post(c.accept_strand, [&c] { c.Accept(); });
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, c.options.limits.io_threads); ++i) threads.emplace_back([&c] { c.io.run(); });
  c.io.run();
  for (std::thread& t : threads) t.join();
}

void Server::Stop(absl::Duration grace) {
  Core& c = *core_;
  asio::post(c.accept_strand, [&c] {
    error_code ignored;
    c.acceptor.close(ignored);
    c.accept_retry.cancel();
  });
  c.CloseAll();
  // The handlers let go of their exchanges once told their clients are gone;
  // until then the loop runs, so that what they post still happens.
  const absl::Time deadline = absl::Now() + grace;
  while (c.Open() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  absl::MutexLock lock(&c.mu);
  c.work.reset();
  c.io.stop();
}

}  // namespace tpserve::httpd
