// One client connection of httpd::Server (server.h): reads requests with
// Beast's parser under the limits, hands each to its route's handler through
// an Exchange, writes the response, and goes on to the next request or closes.
// Internal to httpd/: Asio and Beast appear in no other header of the project.
//
// Everything here runs on the connection's strand (its socket's executor);
// the Exchange's methods post to it. The phases, in order:
//
//   kIdle      waiting for the first byte of a request (idle_timeout between
//              requests; a new connection's first request has header_timeout)
//   kHead      the request line and fields (header_timeout, max_header_bytes)
//   kBody      the body (body_timeout, max_body_bytes)
//   kHandling  the handler has the exchange; the socket is still read, to
//              keep pipelined bytes and to see the client leave (write_timeout
//              while a response write is pending)
//   kLinger    the response is out and the connection ends: our side is shut
//              down and the client's bytes are read and dropped for a moment,
//              so that closing does not reset the connection under a response
//              the client has not read yet
//   kClosed
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "httpd/server.h"

namespace tpserve::httpd {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase : uint8_t { kIdle, kHead, kBody, kHandling, kLinger, kClosed };

  Connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<Server::Core> core,
             std::list<std::weak_ptr<Connection>>::iterator slot);
  ~Connection();  // leaves the registry

  // Starts reading; `refuse`: answers 503 (too many connections) and closes.
  void Start(bool refuse);
  // Closes at once (eviction, Stop). Any thread.
  void Close();
  // Holds no request in flight: idle between requests, still sending a head,
  // lingering after its last response, or closed already (its slot frees soon).
  bool Evictable() const;

  // The Exchange's operations, posted to the strand; `seq` names the exchange,
  // so that one that is over cannot touch the next request's response.
  void Post(std::function<void(Connection&)> op);
  void Respond(uint64_t seq, Response response);
  void BeginStream(uint64_t seq, int status, std::string content_type, Headers headers);
  void Write(uint64_t seq, std::string data, std::function<void(bool)> written);
  void EndStream(uint64_t seq);
  void OnClientGone(uint64_t seq, std::function<void()> gone);
  // A 500 if nothing was sent yet, else the end of the stream.
  void Fail(uint64_t seq, const std::string& message);

 private:
  // What happens once a write is on the wire.
  enum class After : uint8_t { kNothing, kExchangeDone, kLinger };
  struct Out {
    std::string bytes;
    std::function<void(bool)> written;
    After after = After::kNothing;
  };

  void NextRequest();
  void StartReading();
  void OnRead(const boost::system::error_code& ec, size_t n);
  void Parse();
  // Gives the parser the bytes read: kProgress when it took some (or its part
  // is done), kWait when it needs more (a read is started), kRefused.
  enum class Fed : uint8_t { kProgress, kWait, kRefused };
  Fed Feed();
  bool ParseHead();  // false: stop parsing (refused, or waiting for bytes)
  bool ParseBody();
  bool OnHead();     // route, framing, authorize, body limits; false when refused
  void Dispatch();
  // The server's own answer `status`; the connection then closes.
  void Refuse(int status, const std::string& message, Headers headers = {});
  void SendRefusal(Response response);
  void Queue(std::string bytes, std::function<void(bool)> written, After after);
  void Flush();
  void OnWritten(const boost::system::error_code& ec);
  void ExchangeDone();
  void ClientGone();
  void Linger();
  void CloseNow();
  void ArmDeadline(absl::Duration d);
  void Disarm();
  void OnDeadline();
  bool Current(uint64_t seq) const { return seq == seq_ && phase_ == Phase::kHandling; }
  void SetPhase(Phase p) { phase_ = p; phase_atomic_.store(p, std::memory_order_relaxed); }

  const std::list<std::weak_ptr<Connection>>::iterator slot_;  // in Core::connections
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<Server::Core> core_;
  const ServerLimits& limits_;

  Phase phase_ = Phase::kIdle;
  std::atomic<Phase> phase_atomic_{Phase::kIdle};  // phase_ for Evictable on other threads
  bool first_request_ = true;
  bool reading_ = false;
  bool writing_ = false;
  size_t lingered_ = 0;  // bytes dropped while lingering
  uint64_t deadline_gen_ = 0;
  boost::beast::flat_buffer buffer_;  // bytes read, not parsed yet (bounded: limits + 64 KiB)
  std::vector<char> read_chunk_;      // the pending read's target; OnRead appends it to buffer_
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  const Route* route_ = nullptr;  // the request's, from OnHead

  // The exchange in flight (kHandling).
  uint64_t seq_ = 0;
  enum class Reply : uint8_t { kNone, kWhole, kStream, kEnded } reply_ = Reply::kNone;
  bool keep_alive_ = true;
  bool http10_ = false;
  Request head_;  // the request being read
  std::function<void()> gone_;
  std::deque<Out> queued_;
  std::vector<Out> in_flight_;
};

}  // namespace tpserve::httpd
