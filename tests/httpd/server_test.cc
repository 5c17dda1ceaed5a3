// httpd::Server over loopback with a raw client: each bound of server.h
// reached and answered as documented, and the server serving the next client
// afterwards. Timeouts here are short (hundreds of milliseconds) so the tests
// are quick; every wait for an outcome allows seconds, so a loaded machine
// cannot fail them.
#include "httpd/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/httpd/raw_client.h"

namespace tpserve::httpd {
namespace {

using testing::RawClient;
using testing::RawResponse;

constexpr absl::Duration kPatience = absl::Seconds(5);  // how long an expected outcome may take

// The exchanges a test's "hold" handler keeps, and what their clients did.
struct Held {
  absl::Mutex mu;
  std::vector<std::shared_ptr<Exchange>> exchanges ABSL_GUARDED_BY(mu);
  std::atomic<int> gone{0};
  bool AwaitCount(size_t n) {
    absl::MutexLock lock(&mu);
    auto reached = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return exchanges.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&reached), kPatience);
  }
  bool AwaitGone(int n) {
    const absl::Time deadline = absl::Now() + kPatience;
    while (gone.load() < n && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    return gone.load() >= n;
  }
};

class HttpdTest : public ::testing::Test {
 protected:
  void Start(ServerLimits limits = Fast()) {
    ServerOptions options;
    options.limits = limits;
    options.authorize = [](const Request& head) -> std::optional<Response> {
      if (head.Header("Authorization") == "Bearer good") return std::nullopt;
      return Response{.status = 401, .content_type = "text/plain", .body = "no key\n"};
    };
    std::vector<Route> routes;
    routes.push_back({"GET", "/ping", [](std::shared_ptr<Exchange> e) { e->Respond({.body = "pong"}); }, false});
    routes.push_back({"POST", "/echo", [](std::shared_ptr<Exchange> e) {
                        e->Respond({.content_type = "text/plain", .body = e->request().body});
                      }, false});
    routes.push_back({"POST", "/private", [](std::shared_ptr<Exchange> e) { e->Respond({.body = "ok"}); }, true});
    routes.push_back({"GET", "/hold", [this](std::shared_ptr<Exchange> e) {
                        e->OnClientGone([this] { held_.gone++; });
                        absl::MutexLock lock(&held_.mu);
                        held_.exchanges.push_back(std::move(e));
                      }, false});
    routes.push_back({"GET", "/drop", [](std::shared_ptr<Exchange>) {}, false});
    routes.push_back({"GET", "/stream", [](std::shared_ptr<Exchange> e) {
                        e->BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
                        for (const char* part : {"data: a\n\n", "", "data: b\n\n"}) e->Write(part, nullptr);
                        e->EndStream();
                      }, false});
    server_ = std::make_unique<Server>(std::move(options), std::move(routes));
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] { server_->Run(); });
  }
  static ServerLimits Fast() {
    ServerLimits l;
    l.max_body_bytes = 1000;
    l.max_header_bytes = 4096;
    l.header_timeout = absl::Milliseconds(300);
    l.body_timeout = absl::Milliseconds(300);
    l.idle_timeout = absl::Milliseconds(300);
    l.write_timeout = absl::Milliseconds(300);
    return l;
  }
  void TearDown() override {
    {
      absl::MutexLock lock(&held_.mu);
      held_.exchanges.clear();
    }
    if (server_ != nullptr) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return server_->port(); }
  // A fresh connection's GET /ping answers 200.
  void ExpectServing() {
    RawClient c(port());
    ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::optional<RawResponse> r = c.Read();
    ASSERT_TRUE(r.has_value()) << "the server stopped answering";
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "pong");
  }
  // Sends `request` on a new connection: its response, and whether the server then closed.
  std::optional<RawResponse> Once(const std::string& request, bool* closed = nullptr) {
    RawClient c(port());
    EXPECT_TRUE(c.Send(request));
    std::optional<RawResponse> r = c.Read();
    if (closed != nullptr) *closed = c.ClosedWithin(kPatience);
    return r;
  }

  Held held_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

TEST_F(HttpdTest, GetPostAndKeepAlive) {
  Start();
  RawClient c(port());
  ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<RawResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "pong");
  EXPECT_EQ(r->Header("content-type"), "application/json");
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "hello");
  EXPECT_EQ(server_->open_connections(), 1u);
}

// Two requests in one segment: both answered, in order (the second is not dropped).
TEST_F(HttpdTest, PipelinedRequestsAreAnsweredInOrder) {
  Start();
  RawClient c(port());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\none"
                     "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n"
                     "GET /ping HTTP/1.1\r\n\r\n"));
  for (const char* body : {"one", "two", "pong"}) {
    std::optional<RawResponse> r = c.Read();
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->body, body);
  }
}

// After pipelined requests, the next request on the connection arrives whole.
// The read started while the first was handled is still pending when the
// second is parsed out of the buffer; the bytes it brings must land after
// what is left, not over the parsed bytes (once, the third request's body
// read back the first's).
TEST_F(HttpdTest, RequestAfterPipelinedOnesIsReadIntact) {
  Start();
  RawClient c(port());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nfirst"
                     "POST /echo HTTP/1.1\r\nContent-Length: 6\r\n\r\nsecond"));
  for (const char* body : {"first", "second"}) {
    std::optional<RawResponse> r = c.Read();
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->body, body);
  }
  for (const char* body : {"third", "fourth-and-longer", "5"}) {
    ASSERT_TRUE(c.Send(absl::StrCat("POST /echo HTTP/1.1\r\nContent-Length: ", strlen(body), "\r\n\r\n", body)));
    std::optional<RawResponse> r = c.Read();
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 200) << body;
    EXPECT_EQ(r->body, body);
  }
}

// Chunked bodies count against the limit as they arrive: 413, connection closed.
TEST_F(HttpdTest, ChunkedBodyPastTheLimitIs413) {
  Start();
  RawClient c(port());
  std::string request = "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 30; ++i) request += absl::StrCat("64\r\n", std::string(100, 'x'), "\r\n");
  request += "0\r\n\r\n";
  c.Send(request);
  std::optional<RawResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("1000 bytes"), std::string::npos) << r->body;
  EXPECT_TRUE(c.ClosedWithin(kPatience));
  ExpectServing();
}

// A Content-Length past the limit is refused before any body byte is sent.
TEST_F(HttpdTest, ContentLengthPastTheLimitIsRefusedBeforeTheBody) {
  Start();
  bool closed = false;
  std::optional<RawResponse> r = Once("POST /echo HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n", &closed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_TRUE(closed);
  // Exactly at the limit is fine.
  r = Once(absl::StrCat("POST /echo HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", std::string(1000, 'y')));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.size(), 1000u);
}

// A POST with neither Content-Length nor chunked framing: 411 at once, not a read until the client pauses.
TEST_F(HttpdTest, PostWithoutFramingIs411) {
  Start();
  std::optional<RawResponse> r = Once("POST /echo HTTP/1.1\r\nHost: x\r\n\r\nsome bytes");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 411);
}

TEST_F(HttpdTest, ConflictingFramingIsRefused) {
  Start();
  struct Case {
    std::string head;
    int status;
  };
  for (const Case& c : std::vector<Case>{
           {"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", 400},
           {"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", 400},
           {"Content-Length: 3\r\nContent-Length: 4\r\n", 400},
           {"Content-Length: 3, 4\r\n", 400},
           {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400},
           {"Transfer-Encoding: gzip\r\n", 400},
           {"Transfer-Encoding: gzip, chunked\r\n", 501},
           {"Content-Length: -3\r\n", 400},
       }) {
    bool closed = false;
    std::optional<RawResponse> r = Once(absl::StrCat("POST /echo HTTP/1.1\r\n", c.head, "\r\nabc"), &closed);
    ASSERT_TRUE(r) << c.head;
    EXPECT_EQ(r->status, c.status) << c.head << r->body;
    EXPECT_TRUE(closed) << c.head;
  }
  ExpectServing();
}

TEST_F(HttpdTest, HeadersPastTheLimitAre431) {
  Start();
  std::string head = "GET /ping HTTP/1.1\r\n";
  for (int i = 0; i < 400000 && head.size() < 100000; ++i) head += absl::StrCat("X-", i, ": v\r\n");
  RawClient c(port());
  c.Send(head + "\r\n");  // the server may close before taking it all
  std::optional<RawResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  ExpectServing();
}

TEST_F(HttpdTest, SlowHeadersGet408AndTheConnectionCloses) {
  Start();
  RawClient c(port());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(c.Send("GET /pi"));
  std::optional<RawResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  EXPECT_TRUE(c.ClosedWithin(kPatience));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  // A connection that sends nothing at all is closed by the same deadline.
  RawClient silent(port());
  EXPECT_TRUE(silent.ClosedWithin(kPatience));
}

// Trickling a byte at a time does not extend the deadline (slowloris).
TEST_F(HttpdTest, TricklingHeadersDoesNotExtendTheDeadline) {
  Start();
  RawClient c(port());
  const std::string head = "GET /ping HTTP/1.1\r\nX-Slow: " + std::string(200, 'a');
  const absl::Time start = absl::Now();
  bool cut = false;
  for (char ch : head) {
    if (!c.Send(std::string(1, ch))) {
      cut = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
    if (absl::Now() - start > absl::Seconds(2)) break;
  }
  EXPECT_TRUE(cut || c.ClosedWithin(kPatience));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2) + kPatience);
}

TEST_F(HttpdTest, IdleKeepAliveConnectionsAreClosed) {
  Start();
  RawClient c(port());
  ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(c.Read());
  EXPECT_TRUE(c.ClosedWithin(kPatience));
}

// At the cap a new connection evicts the oldest idle one; /ping still answers.
TEST_F(HttpdTest, AtTheConnectionCapIdleConnectionsMakeRoom) {
  ServerLimits limits = Fast();
  limits.max_connections = 4;
  limits.idle_timeout = limits.header_timeout = absl::Seconds(60);
  Start(limits);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<RawClient>(port()));
  const absl::Time deadline = absl::Now() + kPatience;
  while (server_->open_connections() < 4 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ExpectServing();
  EXPECT_TRUE(idle[0]->ClosedWithin(kPatience)) << "the oldest idle connection was not the one evicted";
}

// A connection lingering after a refusal (its client has not closed yet)
// holds no request: at the cap it makes room too.
TEST_F(HttpdTest, AtTheCapLingeringConnectionsMakeRoom) {
  ServerLimits limits = Fast();
  limits.max_connections = 2;
  Start(limits);
  RawClient a(port()), b(port());
  a.Send("POST /echo HTTP/1.1\r\n\r\n");  // 411, then the server lingers on it
  b.Send("POST /echo HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.Read());
  ASSERT_TRUE(b.Read());
  ExpectServing();
}

// At the cap with every connection busy, a new one gets 503.
TEST_F(HttpdTest, AtTheCapWithNoIdleConnectionANewOneGets503) {
  ServerLimits limits = Fast();
  limits.max_connections = 2;
  Start(limits);
  RawClient a(port()), b(port());
  a.Send("GET /hold HTTP/1.1\r\n\r\n");
  b.Send("GET /hold HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(held_.AwaitCount(2));
  bool closed = false;
  std::optional<RawResponse> r = Once("GET /ping HTTP/1.1\r\n\r\n", &closed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(closed);
}

// A client that closes, or half-closes, while its request is in flight is gone.
TEST_F(HttpdTest, ClientThatLeavesMidRequestIsReportedGone) {
  Start();
  {
    RawClient c(port());
    c.Send("GET /hold HTTP/1.1\r\n\r\n");
    ASSERT_TRUE(held_.AwaitCount(1));
  }
  EXPECT_TRUE(held_.AwaitGone(1));
  RawClient half(port());
  half.Send("GET /hold HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(held_.AwaitCount(2));
  half.ShutdownWrite();
  EXPECT_TRUE(held_.AwaitGone(2));
  // A callback set after the client left runs at once.
  std::shared_ptr<Exchange> first;
  {
    absl::MutexLock lock(&held_.mu);
    first = held_.exchanges[0];
  }
  auto late = std::make_shared<absl::Notification>();
  first->OnClientGone([late] { late->Notify(); });
  EXPECT_TRUE(late->WaitForNotificationWithTimeout(kPatience));
}

TEST_F(HttpdTest, UnknownPathIs404AndWrongMethodIs405) {
  Start();
  std::optional<RawResponse> r = Once(absl::StrCat("GET /", std::string(3000, 'n'), " HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_LT(r->body.size(), 400u) << "the path is echoed whole";
  r = Once("POST /ping HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->Header("allow"), "GET");
}

// The key is checked before the body is read: a 401 comes with no body sent.
TEST_F(HttpdTest, AuthorizeRunsBeforeTheBody) {
  Start();
  std::optional<RawResponse> r = Once("POST /private HTTP/1.1\r\nContent-Length: 900\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = Once("POST /private HTTP/1.1\r\nAuthorization: Bearer good\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpdTest, Expect100ContinueGetsItsInterimResponse) {
  Start();
  RawClient c(port());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(c.ReadRaw(25, kPatience), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(c.Send("body"));
  std::optional<RawResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "body");
}

// A stream: chunked, an empty write sends nothing (it would end the stream), keep-alive after.
TEST_F(HttpdTest, StreamIsChunkedAndTheConnectionIsReused) {
  Start();
  RawClient c(port());
  ASSERT_TRUE(c.Send("GET /stream HTTP/1.1\r\n\r\n"));
  std::optional<RawResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->Header("transfer-encoding"), "chunked");
  EXPECT_EQ(r->Header("cache-control"), "no-cache");
  EXPECT_EQ(r->body, "data: a\n\ndata: b\n\n");
  ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\n\r\n"));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "pong");
}

// HTTP/1.0 gets the stream close-delimited.
TEST_F(HttpdTest, Http10StreamEndsWithTheConnection) {
  Start();
  RawClient c(port());
  ASSERT_TRUE(c.Send("GET /stream HTTP/1.0\r\n\r\n"));
  std::optional<RawResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->Header("transfer-encoding"), "");
  EXPECT_EQ(r->body, "data: a\n\ndata: b\n\n");
}

// A client that stops reading a stream is cut after write_timeout: the
// writes report false and the handler hears it is gone.
TEST_F(HttpdTest, StreamToAClientThatDoesNotReadIsCut) {
  Start();
  RawClient c(port());
  c.Send("GET /hold HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(held_.AwaitCount(1));
  std::shared_ptr<Exchange> e;
  {
    absl::MutexLock lock(&held_.mu);
    e = held_.exchanges[0];
  }
  e->BeginStream(200, "text/event-stream", {});
  // Shared: the last callbacks may run after the test has seen the first.
  auto failed = std::make_shared<std::atomic<int>>(0);
  for (int i = 0; i < 64; ++i) {
    e->Write(std::string(1 << 20, 'z'), [failed](bool ok) {
      if (!ok) ++*failed;
    });
  }
  EXPECT_TRUE(held_.AwaitGone(1));
  const absl::Time deadline = absl::Now() + kPatience;
  while (failed->load() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_GT(failed->load(), 0);
}

TEST_F(HttpdTest, AHandlerThatDropsItsExchangeAnswers500) {
  Start();
  std::optional<RawResponse> r = Once("GET /drop HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
}

TEST_F(HttpdTest, StopTellsHandlersTheirClientsAreGone) {
  Start();
  RawClient c(port());
  c.Send("GET /hold HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(held_.AwaitCount(1));
  std::thread stopper([this] { server_->Stop(absl::Seconds(1)); });
  EXPECT_TRUE(held_.AwaitGone(1));
  {
    absl::MutexLock lock(&held_.mu);
    held_.exchanges.clear();
  }
  stopper.join();
  thread_.join();
  EXPECT_EQ(server_->open_connections(), 0u);
}

}  // namespace
}  // namespace tpserve::httpd
