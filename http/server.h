// tpserve-http's server: OpenAI-compatible HTTP in front of the public gRPC
// API, as a client of it. Stateless: every HTTP request is one gRPC call
// (plus Detokenize, naming log-probs' tokens: once per answer or per streamed
// chunk), so it can run beside a coordinator or anywhere that reaches one.
//
//   POST /v1/chat/completions, /v1/completions   Generate (generate_call.h; stream: true
//                                                 answers server-sent events, openai_response.h)
//   GET  /v1/models                               GetModelInfo
//   POST /tokenize, /detokenize                   Tokenize, Detokenize (vLLM's shapes)
//   GET  /health                                  `healthy`: 200 or 503; never needs a key
//
// The HTTP side is httpd::Server (httpd/server.h): connections, deadlines and
// every size limit are bounded there, and the API key is checked before a
// body is read. The gRPC side is the callback API (coordinator_client.h): no
// thread waits on a request, so an open stream costs a socket, not a thread.
// A client that leaves cancels its gRPC call, streaming or not; the
// coordinator frees the request at its next step.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "auth/api_keys.h"
#include "http/coordinator_client.h"
#include "http/openai_request.h"
#include "httpd/server.h"

namespace tpserve::http {

// The coordinator's largest request message (gRPC's default receive limit,
// which the public port keeps): a larger one is a 413 here, not a 429 from gRPC.
inline constexpr size_t kMaxGrpcRequestBytes = 4 << 20;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                  // 0: any free port (port() says which)
  httpd::ServerLimits limits;       // connections, deadlines, header and body sizes (max_body_bytes: 413)
  std::optional<ApiKeys> api_keys;  // when set, every endpoint but /health needs a key: 401
  std::string coordinator_api_key;  // sent to the coordinator as "authorization: Bearer" ("" = none)
  // GET /health: calls `done(serving)` once, from any thread, without
  // blocking the caller. Null: always healthy.
  std::function<void(std::function<void(bool serving)> done)> healthy;
};

class Server {
 public:
  Server(std::shared_ptr<grpc::Channel> channel, ServerOptions options);
  ~Server();  // Stop()s, then waits for the gRPC calls it cancelled to end

  // Binds the listening socket: INVALID_ARGUMENT naming --listen when it cannot.
  absl::Status Bind();
  int port() const;
  // Serves until Stop (from another thread or a signal-watching one).
  void Run();
  void Stop();

 private:
  std::vector<httpd::Route> Routes();
  std::optional<httpd::Response> Authorize(const httpd::Request& head) const;
  void Generate(Endpoint endpoint, std::shared_ptr<httpd::Exchange> exchange);
  void Models(std::shared_ptr<httpd::Exchange> exchange);
  void Tokenize(std::shared_ptr<httpd::Exchange> exchange);
  void Detokenize(std::shared_ptr<httpd::Exchange> exchange);
  void Health(std::shared_ptr<httpd::Exchange> exchange);
  // Calls `then(served model name)` once the model is known and `model` is
  // empty or that one; else answers 404 model_not_found (or the gRPC error).
  void CheckModel(const std::string& model, Endpoint endpoint, std::shared_ptr<httpd::Exchange> exchange,
                  std::function<void(std::string served)> then);

  const ServerOptions options_;
  CoordinatorClient client_;
  std::unique_ptr<httpd::Server> http_;
};

}  // namespace tpserve::http
