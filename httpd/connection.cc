#include "httpd/connection.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httpd/core.h"

namespace tpserve::httpd {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kSlack = 64 << 10;                   // buffer room past the head limit: pipelined bytes, chunk heads
// Reading a closing client's last bytes: this long, and this many at most.
constexpr absl::Duration kLinger = absl::Seconds(2);
constexpr size_t kLingerBytes = 1 << 20;

std::string Reason(int status) {
  const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return std::string(reason.data(), reason.size());
}

// A header field's text without CR or LF: a value can never start another field.
std::string FieldText(absl::string_view s) {
  std::string out(s);
  out.erase(std::remove_if(out.begin(), out.end(), [](char c) { return c == '\r' || c == '\n'; }), out.end());
  return out;
}

// The response head. `length`: Content-Length; `chunked`: Transfer-Encoding.
std::string Head(int status, const std::string& content_type, const Headers& headers, std::optional<size_t> length,
                 bool chunked, bool close) {
  std::string out = absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\n");
  if (!content_type.empty()) absl::StrAppend(&out, "Content-Type: ", FieldText(content_type), "\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&out, FieldText(name), ": ", FieldText(value), "\r\n");
  if (length) absl::StrAppend(&out, "Content-Length: ", *length, "\r\n");
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  return out;
}

// The status a parse error answers, and what to tell the client.
std::pair<int, std::string> ParseRefusal(const error_code& ec, const ServerLimits& limits) {
  if (ec == bhttp::error::header_limit) {
    return {431, absl::StrCat("the request line and headers are larger than this server's limit (",
                              limits.max_header_bytes, " bytes)")};
  }
  if (ec == bhttp::error::body_limit) {
    return {413, absl::StrCat("the body is larger than this server's --max-body-bytes (", limits.max_body_bytes,
                              " bytes)")};
  }
  if (ec == bhttp::error::bad_content_length || ec == bhttp::error::bad_transfer_encoding) {
    return {400, absl::StrCat("conflicting or malformed message framing (", ec.message(),
                              "): send one Content-Length, or Transfer-Encoding: chunked alone")};
  }
  return {400, absl::StrCat("malformed HTTP request: ", ec.message())};
}

std::string Truncated(absl::string_view s, size_t n = 100) {
  if (s.size() <= n) return std::string(s);
  return absl::StrCat(s.substr(0, n), "... (", s.size(), " bytes)");
}

// An Exchange is a handle on its connection and its place in it (seq).
class ConnectionExchange final : public Exchange {
 public:
  ConnectionExchange(std::shared_ptr<Connection> connection, uint64_t seq, Request request)
      : connection_(std::move(connection)), seq_(seq), request_(std::move(request)) {}
  // A handler that lets go without answering gets a 500 for its client.
  ~ConnectionExchange() override {
    if (!answered_) connection_->Post([seq = seq_](Connection& c) { c.Fail(seq, "the handler gave no response"); });
  }
  const Request& request() const override { return request_; }
  void Respond(Response response) override {
    answered_ = true;
    connection_->Post([seq = seq_, r = std::move(response)](Connection& c) mutable { c.Respond(seq, std::move(r)); });
  }
  void BeginStream(int status, std::string content_type, Headers headers) override {
    answered_ = true;
    connection_->Post([=, ct = std::move(content_type), h = std::move(headers), seq = seq_](Connection& c) mutable {
      c.BeginStream(seq, status, std::move(ct), std::move(h));
    });
  }
  void Write(std::string data, std::function<void(bool)> written) override {
    connection_->Post([seq = seq_, d = std::move(data), w = std::move(written)](Connection& c) mutable {
      c.Write(seq, std::move(d), std::move(w));
    });
  }
  void EndStream() override {
    connection_->Post([seq = seq_](Connection& c) { c.EndStream(seq); });
  }
  void OnClientGone(std::function<void()> gone) override {
    connection_->Post([seq = seq_, g = std::move(gone)](Connection& c) mutable { c.OnClientGone(seq, std::move(g)); });
  }

 private:
  const std::shared_ptr<Connection> connection_;
  const uint64_t seq_;
  const Request request_;
  std::atomic<bool> answered_{false};
};

}  // namespace

Connection::Connection(asio::ip::tcp::socket socket, std::shared_ptr<Server::Core> core,
                       Server::Core::Registry::iterator slot)
    : slot_(slot),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      core_(std::move(core)),
      limits_(core_->options.limits),
      buffer_(limits_.max_header_bytes + kSlack),
      read_chunk_(kReadChunk) {}

Connection::~Connection() { core_->Unregister(slot_); }

bool Connection::Evictable() const {
  const Phase p = phase_atomic_.load(std::memory_order_relaxed);
  return p != Phase::kBody && p != Phase::kHandling;
}

void Connection::Post(std::function<void(Connection&)> op) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), op = std::move(op)] { op(*self); });
}

void Connection::Start(bool refuse) {
  if (refuse) {
    return Refuse(503, absl::StrCat("this server has ", limits_.max_connections,
                                    " connections open, none of them idle; retry shortly"));
  }
  NextRequest();
}

void Connection::Close() {
  Post([](Connection& c) {
    if (c.phase_ == Phase::kHandling) return c.ClientGone();
    c.CloseNow();
  });
}

void Connection::NextRequest() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(limits_.max_header_bytes, UINT32_MAX)));
  // OnHead sets the limit: the route and the key come first. (Not boost::none:
  // Beast 1.74 compares the length with the optional, and any length is > none.)
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  route_ = nullptr;
  head_ = Request();
  SetPhase(Phase::kIdle);
  ArmDeadline(first_request_ ? limits_.header_timeout : limits_.idle_timeout);
  Parse();
}

void Connection::StartReading() {
  if (reading_ || phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kLinger) {  // dropped: nobody reads them
    lingered_ += buffer_.size();
    buffer_.clear();
    if (lingered_ > kLingerBytes) return CloseNow();
  }
  const size_t room = buffer_.max_size() - buffer_.size();
  if (room == 0 && phase_ != Phase::kLinger) {
    // A head that does not fit (the parser keeps it whole until it ends), or
    // pipelined requests piling up behind one in flight: wait for it.
    if (phase_ == Phase::kHead) Refuse(431, ParseRefusal(bhttp::error::header_limit, limits_).second);
    return;
  }
  // Into read_chunk_, not buffer_: the parser consumes from buffer_ while this
  // read is pending (a pipelined request parsed once the one before is
  // answered), and consuming may move buffer_'s free space under the read.
  reading_ = true;
  socket_.async_read_some(asio::buffer(read_chunk_.data(), std::min(read_chunk_.size(), room)),
                          [self = shared_from_this()](const error_code& ec, size_t n) { self->OnRead(ec, n); });
}

void Connection::OnRead(const error_code& ec, size_t n) {
  reading_ = false;
  if (ec) {
    // EOF (also a half-close), a reset, or our own close.
    if (phase_ == Phase::kHandling) return ClientGone();
    return CloseNow();
  }
  // buffer_ only shrank while the read was pending: the `room` it was sized by is still there.
  buffer_.commit(asio::buffer_copy(buffer_.prepare(n), asio::buffer(read_chunk_.data(), n)));
  switch (phase_) {
    case Phase::kIdle:
    case Phase::kHead:
    case Phase::kBody:
      return Parse();
    case Phase::kHandling:
    case Phase::kLinger:
      return StartReading();
    case Phase::kClosed:
      return;
  }
}

void Connection::Parse() {
  for (;;) {
    if (phase_ == Phase::kIdle) {
      if (buffer_.size() == 0) break;
      SetPhase(Phase::kHead);
      if (!first_request_) ArmDeadline(limits_.header_timeout);
    }
    if (phase_ == Phase::kHead && !ParseHead()) return;
    if (phase_ == Phase::kBody && !ParseBody()) return;
    if (phase_ != Phase::kIdle && phase_ != Phase::kHead && phase_ != Phase::kBody) return;
  }
  StartReading();
}

Connection::Fed Connection::Feed() {
  if (buffer_.size() == 0) {
    StartReading();
    return Fed::kWait;
  }
  error_code ec;
  const size_t used = parser_->put(buffer_.data(), ec);
  buffer_.consume(used);
  if (ec == bhttp::error::need_more) {
    if (used > 0) return Fed::kProgress;
    StartReading();
    return Fed::kWait;
  }
  if (ec) {
    auto [status, message] = ParseRefusal(ec, limits_);
    Refuse(status, message);
    return Fed::kRefused;
  }
  return Fed::kProgress;
}

bool Connection::ParseHead() {
  if (Feed() != Fed::kProgress) return false;
  return !parser_->is_header_done() || OnHead();
}

bool Connection::ParseBody() {
  if (parser_->is_done()) {
    Dispatch();
    return false;
  }
  return Feed() == Fed::kProgress;
}

bool Connection::OnHead() {
  const auto& h = parser_->get();
  head_.method = std::string(h.method_string().data(), h.method_string().size());
  head_.target = std::string(h.target().data(), h.target().size());
  head_.path = head_.target.substr(0, head_.target.find('?'));
  head_.http10 = h.version() < 11;
  for (const auto& field : h) {
    head_.headers.emplace_back(std::string(field.name_string().data(), field.name_string().size()),
                               std::string(field.value().data(), field.value().size()));
  }
  // Transfer-Encoding: exactly `chunked`. Beast takes "gzip" as no framing and
  // "gzip, chunked" as chunked; a proxy in front may do neither.
  if (auto te = h.find(bhttp::field::transfer_encoding); te != h.end()) {
    const absl::string_view coding(te->value().data(), te->value().size());
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(coding), "chunked")) {
      Refuse(parser_->chunked() ? 501 : 400,
             absl::StrCat("Transfer-Encoding \"", Truncated(coding), "\" is not supported: send the body with ",
                          "Content-Length, or Transfer-Encoding: chunked alone"));
      return false;
    }
  }
  std::string allow;
  route_ = core_->Find(head_.method, head_.path, &allow);
  if (route_ == nullptr && allow.empty()) {
    Refuse(404, absl::StrCat("no such endpoint: ", Truncated(head_.method, 16), " ", Truncated(head_.path)));
    return false;
  }
  if (route_ == nullptr) {
    Refuse(405, absl::StrCat(head_.path, " takes ", allow, ", not ", Truncated(head_.method, 16)), {{"Allow", allow}});
    return false;
  }
  if (route_->authorize && core_->options.authorize) {
    if (std::optional<Response> refusal = core_->options.authorize(head_)) {
      SendRefusal(*std::move(refusal));
      return false;
    }
  }
  const bool has_length = h.find(bhttp::field::content_length) != h.end();
  if (head_.method == "POST" && !has_length && !parser_->chunked()) {
    Refuse(411, "send the body's Content-Length (or Transfer-Encoding: chunked)");
    return false;
  }
  if (parser_->content_length() && *parser_->content_length() > limits_.max_body_bytes) {
    Refuse(413, ParseRefusal(bhttp::error::body_limit, limits_).second);
    return false;
  }
  parser_->body_limit(limits_.max_body_bytes);
  if (!parser_->is_done() && absl::EqualsIgnoreCase(head_.Header("Expect"), "100-continue") && !head_.http10) {
    Queue("HTTP/1.1 100 Continue\r\n\r\n", nullptr, After::kNothing);
  }
  SetPhase(Phase::kBody);
  ArmDeadline(limits_.body_timeout);
  return true;
}

void Connection::Dispatch() {
  head_.body = std::move(parser_->get().body());
  keep_alive_ = parser_->keep_alive() && !head_.http10;
  http10_ = head_.http10;
  first_request_ = false;
  SetPhase(Phase::kHandling);
  Disarm();
  ++seq_;
  reply_ = Reply::kNone;
  gone_ = nullptr;
  auto exchange = std::make_shared<ConnectionExchange>(shared_from_this(), seq_, std::move(head_));
  StartReading();  // to see the client leave, and to keep what it pipelines
  try {
    route_->handler(std::move(exchange));
  } catch (const std::exception&) {
    Fail(seq_, "the handler failed");
  }
}

void Connection::Fail(uint64_t seq, const std::string& message) {
  if (!Current(seq)) return;
  if (reply_ == Reply::kNone) return Respond(seq, core_->Error(500, message));
  if (reply_ == Reply::kStream) EndStream(seq);
}

void Connection::Respond(uint64_t seq, Response r) {
  if (!Current(seq) || reply_ != Reply::kNone) return;
  reply_ = Reply::kWhole;
  std::string bytes = Head(r.status, r.content_type, r.headers, r.body.size(), false, !keep_alive_);
  bytes += r.body;
  Queue(std::move(bytes), nullptr, After::kExchangeDone);
}

void Connection::BeginStream(uint64_t seq, int status, std::string content_type, Headers headers) {
  if (!Current(seq) || reply_ != Reply::kNone) return;
  reply_ = Reply::kStream;
  if (http10_) keep_alive_ = false;  // close-delimited
  Queue(Head(status, content_type, headers, std::nullopt, !http10_, !keep_alive_), nullptr, After::kNothing);
}

void Connection::Write(uint64_t seq, std::string data, std::function<void(bool)> written) {
  if (!Current(seq) || reply_ != Reply::kStream) {
    if (written) written(false);
    return;
  }
  if (!data.empty() && !http10_) data = absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n");
  Queue(std::move(data), std::move(written), After::kNothing);
}

void Connection::EndStream(uint64_t seq) {
  if (!Current(seq) || reply_ != Reply::kStream) return;
  reply_ = Reply::kEnded;
  Queue(http10_ ? std::string() : std::string("0\r\n\r\n"), nullptr, After::kExchangeDone);
}

void Connection::OnClientGone(uint64_t seq, std::function<void()> gone) {
  if (seq != seq_) return;  // its response is complete: the client is not gone before it
  if (phase_ == Phase::kHandling) {
    gone_ = std::move(gone);
  } else if (phase_ == Phase::kClosed && gone) {
    gone();
  }
}

void Connection::Refuse(int status, const std::string& message, Headers headers) {
  Response r = core_->Error(status, message);
  r.headers.insert(r.headers.end(), headers.begin(), headers.end());
  SendRefusal(std::move(r));
}

void Connection::SendRefusal(Response r) {
  // The connection closes after a refusal: the rest of the request (its body)
  // is not read, and what follows it could not be told apart from it.
  SetPhase(Phase::kLinger);
  std::string bytes = Head(r.status, r.content_type, r.headers, r.body.size(), false, /*close=*/true);
  bytes += r.body;
  ArmDeadline(limits_.write_timeout);
  Queue(std::move(bytes), nullptr, After::kLinger);
}

void Connection::Queue(std::string bytes, std::function<void(bool)> written, After after) {
  queued_.push_back(Out{std::move(bytes), std::move(written), after});
  Flush();
}

void Connection::Flush() {
  if (writing_ || queued_.empty() || phase_ == Phase::kClosed) return;
  in_flight_.assign(std::make_move_iterator(queued_.begin()), std::make_move_iterator(queued_.end()));
  queued_.clear();
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(in_flight_.size());
  for (const Out& out : in_flight_) buffers.emplace_back(out.bytes.data(), out.bytes.size());
  writing_ = true;
  if (phase_ == Phase::kHandling) ArmDeadline(limits_.write_timeout);
  asio::async_write(socket_, buffers,
                    [self = shared_from_this()](const error_code& ec, size_t) { self->OnWritten(ec); });
}

void Connection::OnWritten(const error_code& ec) {
  writing_ = false;
  std::vector<Out> done = std::move(in_flight_);
  in_flight_.clear();
  if (ec) {
    for (Out& out : done) {
      if (out.written) out.written(false);
    }
    if (phase_ == Phase::kHandling) return ClientGone();
    return CloseNow();
  }
  After after = After::kNothing;
  for (Out& out : done) {
    if (out.written) out.written(true);
    if (out.after != After::kNothing) after = out.after;
  }
  if (phase_ == Phase::kHandling && queued_.empty()) Disarm();
  if (after == After::kExchangeDone && phase_ == Phase::kHandling) return ExchangeDone();
  if (after == After::kLinger) return Linger();
  Flush();
}

void Connection::ExchangeDone() {
  gone_ = nullptr;
  ++seq_;  // the exchange may still be held; its calls now do nothing
  if (!keep_alive_) return Linger();
  NextRequest();
}

void Connection::ClientGone() {
  std::function<void()> gone = std::move(gone_);
  gone_ = nullptr;
  CloseNow();
  if (gone) gone();
}

void Connection::Linger() {
  SetPhase(Phase::kLinger);
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  ArmDeadline(kLinger);
  StartReading();
}

void Connection::CloseNow() {
  if (phase_ == Phase::kClosed) return;
  SetPhase(Phase::kClosed);
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  Disarm();
  std::deque<Out> queued = std::move(queued_);
  queued_.clear();
  for (Out& out : queued) {
    if (out.written) out.written(false);
  }
}

void Connection::ArmDeadline(absl::Duration d) {
  const uint64_t gen = ++deadline_gen_;
  timer_.expires_after(absl::ToChronoNanoseconds(d));
  timer_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
    if (!ec && gen == self->deadline_gen_) self->OnDeadline();
  });
}

void Connection::Disarm() {
  ++deadline_gen_;
  timer_.cancel();
}

void Connection::OnDeadline() {
  switch (phase_) {
    case Phase::kHead:
    case Phase::kBody:
      if (!writing_) return Refuse(408, "the request did not arrive in time");
      return CloseNow();
    case Phase::kHandling:  // a write the client did not take in time
      return ClientGone();
    case Phase::kIdle:
    case Phase::kLinger:
    case Phase::kClosed:
      return CloseNow();
  }
}

}  // namespace tpserve::httpd
