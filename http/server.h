// tpserve-http's server: OpenAI-compatible HTTP (cpp-httplib) in front of the
// public gRPC API, as a client of it. Stateless: every HTTP request is one
// gRPC call (plus Detokenize, naming log-probs' tokens: once per answer or per
// streamed chunk), so it can run beside a coordinator or anywhere that reaches one.
//
//   POST /v1/chat/completions, /v1/completions   Generate (stream: true answers
//                                                 server-sent events; see openai_response.h)
//   GET  /v1/models                               GetModelInfo
//   POST /tokenize, /detokenize                   Tokenize, Detokenize (vLLM's shapes)
//   GET  /health                                  the `healthy` callback: 200 or 503
//
// Threads: cpp-httplib's pool of `threads` workers; each HTTP request holds one
// for its whole life (a stream included) and blocks on its gRPC call. The
// model name is read once from the coordinator and cached (mu_). A streaming
// client that goes away fails the next write: its gRPC call is cancelled, so
// the coordinator frees the request at its next step. A non-streaming request
// runs to its end.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "auth/api_keys.h"
#include "http/openai_request.h"
#include "http/openai_response.h"
#include "tpserve/v1/generation.grpc.pb.h"

namespace httplib {
class DataSink;
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tpserve::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (port() says which)
  size_t max_body_bytes = 1 << 20;     // larger bodies: 413
  int threads = 64;                    // concurrent HTTP requests (streams included)
  std::optional<ApiKeys> api_keys;     // when set, every endpoint but /health needs a key: 401
  std::string coordinator_api_key;     // sent to the coordinator as "authorization: Bearer" ("" = none)
  std::function<bool()> healthy;       // GET /health; null: always healthy
};

class Server {
 public:
  Server(std::shared_ptr<grpc::Channel> channel, ServerOptions options);
  ~Server();

  // Binds the listening socket: INVALID_ARGUMENT naming --listen when it cannot.
  absl::Status Bind();
  int port() const { return port_; }
  // Serves until Stop (from another thread or a signal-watching one).
  void Run();
  void Stop();

 private:
  void Route();
  bool Authorized(const httplib::Request& request, httplib::Response& response) const;
  void Generate(int endpoint, const httplib::Request& request, httplib::Response& response);
  struct Call;    // one Generate call (server.cc)
  struct Stream;  // what a streaming response has sent (server.cc)
  // Answers the call as server-sent events, `first` its first response.
  void StreamResponse(std::shared_ptr<Call> call, ResponseHead head, OpenAiRequest request,
                      tpserve::v1::GenerateResponse first, httplib::Response& response);
  // The next gRPC response as SSE events; false when the client is gone.
  bool StreamStep(Stream& stream, httplib::DataSink& sink);
  void Models(httplib::Response& response);
  void Tokenize(const httplib::Request& request, httplib::Response& response);
  void Detokenize(const httplib::Request& request, httplib::Response& response);
  // The served model's name (GetModelInfo, cached once answered).
  grpc::Status ModelInfo(tpserve::v1::ModelInfo* info);
  // 404 model_not_found unless `model` is empty or the served one; fills `served`.
  bool CheckModel(const std::string& model, int endpoint, std::string* served, httplib::Response& response);
  void Context(grpc::ClientContext& context) const;

  std::unique_ptr<tpserve::v1::Generation::Stub> stub_;
  const ServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;

  absl::Mutex mu_;
  std::optional<tpserve::v1::ModelInfo> model_info_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve::http
