// The state httpd::Server's connections share: options, routes, the event
// loop, the listener, and the list of open connections (for the cap and for
// Stop). Internal to httpd/.
#pragma once

#include <atomic>
#include <cstddef>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "httpd/server.h"

namespace tpserve::httpd {

class Connection;

struct Server::Core : std::enable_shared_from_this<Server::Core> {
  using Registry = std::list<std::weak_ptr<Connection>>;

  Core(ServerOptions options, std::vector<Route> routes);

  // The route of `method` `path`; null when there is none, with `allow` the
  // methods the path has ("" when the path has none).
  const Route* Find(const std::string& method, const std::string& path, std::string* allow) const;
  // The server's own refusal `status`.
  Response Error(int status, const std::string& message) const;

  // Every Connection is in the registry from its accept to its destructor.
  Registry::iterator Register();
  void Bind(Registry::iterator it, std::weak_ptr<Connection> connection);
  void Unregister(Registry::iterator it);
  size_t Open() const;

  void Accept();
  void Admit(boost::asio::ip::tcp::socket socket);
  // Closes the oldest evictable connection; false when none is.
  bool EvictOldest();
  void CloseAll();

  const ServerOptions options;
  const std::vector<Route> routes;
  boost::asio::io_context io;
  // The listener's own strand: its handlers and Stop's close never overlap.
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand{boost::asio::make_strand(io)};
  boost::asio::ip::tcp::acceptor acceptor{accept_strand};
  boost::asio::steady_timer accept_retry{accept_strand};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  int port = 0;

  mutable absl::Mutex mu;
  Registry connections ABSL_GUARDED_BY(mu);
  size_t open ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
};

}  // namespace tpserve::httpd
