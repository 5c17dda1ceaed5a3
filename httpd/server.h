// An HTTP/1.1 server for a port an untrusted network can reach: Boost.Beast's
// request parser under an Asio event loop of a few threads. No request holds a
// thread: a handler answers through its Exchange from any thread, whenever it
// is ready (a gRPC callback, say), so a slow or idle client costs a socket and
// a few kilobytes, never a worker. Knows nothing of tpserve's APIs: `http/`
// (tpserve-http) and the coordinator's /metrics endpoint are built on it.
//
// What a client can hold is bounded (ServerLimits), and each bound has its answer:
//
//   connections      max_connections; at the cap a new connection evicts the
//                    oldest one that has no request in flight (idle keep-alive,
//                    still sending its headers, or lingering after its last
//                    response), else gets 503 and is closed
//   request headers  max_header_bytes (request line + fields): 431; the whole
//                    head within header_timeout of its first byte (a new
//                    connection: of its accept): 408 and closed
//   idle keep-alive  idle_timeout between requests: closed
//   request body     max_body_bytes, Content-Length or counted chunked bytes: 413
//                    (a Content-Length over it is refused before any body byte
//                    is read); a POST route with neither Content-Length nor
//                    chunked framing: 411; the body within body_timeout: 408
//   framing          Content-Length with Transfer-Encoding, differing
//                    Content-Lengths, a transfer coding other than `chunked`:
//                    400 (501 for an unknown coding) and closed, since a proxy in
//                    front might have framed the bytes otherwise
//   responses        a response, or each chunk of a stream, must be taken by the
//                    client within write_timeout, else the connection is closed
//
// Order of checks for one request: framing and size of the head, then the
// route (404; 405 with Allow when the path exists for another method), then
// `authorize` (before any byte of the body is read), then the body, then the
// handler. The server's own refusals are made by `error_response`.
//
// A client that closes its connection, resets it, or half-closes it (EOF on
// its side) while its request is in flight is gone: the exchange's
// OnClientGone callback runs, so the handler can stop work nobody will read
// (as nginx and Go's net/http treat an EOF during a request). Pipelined
// requests are kept and answered in order, one at a time.
//
// Threads: `io_threads` run the event loop; each connection is on its own
// strand, so its state needs no lock. Handlers and the Exchange callbacks
// (written, client gone) run on those threads and must not block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tpserve::httpd {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // target before '?'
  Headers headers;     // as sent, in order
  std::string body;    // the whole body (chunked framing removed)
  bool http10 = false; // HTTP/1.0: no chunked responses

  // The first field named `name` (any case); "" when absent.
  absl::string_view Header(absl::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;  // beside Content-Type, Content-Length and Connection
};

// One request's way back to its client. Every method may be called from any
// thread; the calls take effect in the order they are made.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const Request& request() const = 0;

  // The whole response; once, instead of a stream.
  virtual void Respond(Response response) = 0;

  // A streamed response (chunked transfer coding; close-delimited to an HTTP/1.0
  // client): the head now, then each Write's bytes, then EndStream.
  virtual void BeginStream(int status, std::string content_type, Headers headers) = 0;
  // Queues `data`; `written(true)` runs once it is on the wire, `written(false)`
  // once it never will be (the client is gone). Null `written`: nobody asks.
  virtual void Write(std::string data, std::function<void(bool ok)> written) = 0;
  virtual void EndStream() = 0;

  // `gone` runs once, on an I/O thread, if the client goes away before the
  // response is complete; at once if it already has. One callback: a later
  // call replaces an earlier one that has not run.
  virtual void OnClientGone(std::function<void()> gone) = 0;
};

using Handler = std::function<void(std::shared_ptr<Exchange> exchange)>;

struct Route {
  std::string method;  // "GET" or "POST"
  std::string path;    // exact
  Handler handler;
  bool authorize = true;  // run ServerOptions::authorize before the body (false: /health)
};

struct ServerLimits {
  size_t max_connections = 1024;
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(30);
  absl::Duration idle_timeout = absl::Seconds(30);
  absl::Duration write_timeout = absl::Seconds(30);
  int backlog = 1024;  // listen(2)'s queue of connections not yet accepted
  int io_threads = 2;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (Server::port says which)
  ServerLimits limits;
  // A response to send instead of serving the request (401), or nullopt to go
  // on. Sees the method, path and headers only: the body is not read yet.
  std::function<std::optional<Response>(const Request& head)> authorize;
  // The server's own refusals (400, 404, 405, 408, 411, 413, 431, 500, 501,
  // 503) as a response; null: the message as text/plain.
  std::function<Response(int status, const std::string& message)> error_response;
  std::string name = "http";  // in the error of Bind: "--listen" for tpserve-http
};

class Server {
 public:
  Server(ServerOptions options, std::vector<Route> routes);
  ~Server();  // Stop()s

  // Binds and listens (a host name: its first address). UNAVAILABLE naming
  // options.name when the port is taken, INVALID_ARGUMENT when it is no address here.
  absl::Status Bind();
  int port() const;
  // Serves on io_threads threads until Stop; returns once they have ended.
  void Run();
  // Closes the listener and every connection (their clients are gone: the
  // OnClientGone callbacks run), waits up to `grace` for the handlers to let
  // go of their exchanges, and ends Run. Any thread; idempotent.
  void Stop(absl::Duration grace = absl::Seconds(5));

  size_t open_connections() const;  // for tests and logs

  struct Core;  // server.cc

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace tpserve::httpd
