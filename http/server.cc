#include "http/server.h"

#include <malloc.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "http/generate_call.h"
#include "http/http_answer.h"
#include "http/openai_response.h"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;
using nlohmann::json;

// httpd's own refusals (no such path, body too large, too slow...) in OpenAI's shape.
httpd::Response ErrorResponse(int status, const std::string& message) {
  HttpError e{.status = status, .message = message, .type = "invalid_request_error"};
  if (status == 404) e.type = "not_found_error";
  if (status == 503) e.type = "service_unavailable";
  if (status >= 500 && status != 503) e.type = "server_error";
  return JsonResponse(status, ErrorBody(e));
}

constexpr size_t kTrimAfterBodyBytes = 1 << 20;

// At most `n` bytes of a name a client sent, for an error message.
std::string Shortened(const std::string& s, size_t n = 64) {
  return s.size() <= n ? s : absl::StrCat(s.substr(0, n), "... (", s.size(), " bytes)");
}

}  // namespace

Server::Server(std::shared_ptr<grpc::Channel> channel, ServerOptions options)
    : options_(std::move(options)), client_(std::move(channel), options_.coordinator_api_key) {
  httpd::ServerOptions http{.host = options_.host, .port = options_.port, .limits = options_.limits};
  http.name = "--listen";
  http.authorize = [this](const httpd::Request& head) { return Authorize(head); };
  http.error_response = ErrorResponse;
  http_ = std::make_unique<httpd::Server>(std::move(http), Routes());
}

Server::~Server() {
  Stop();
  // Stop told every call its client is gone (they cancel); wait for their ends.
  client_.AwaitIdle(absl::Seconds(10));
}

absl::Status Server::Bind() { return http_->Bind(); }
int Server::port() const { return http_->port(); }
void Server::Run() { http_->Run(); }
void Server::Stop() { http_->Stop(); }

std::vector<httpd::Route> Server::Routes() {
  using E = std::shared_ptr<httpd::Exchange>;
  std::vector<httpd::Route> routes;
  routes.push_back({"POST", "/v1/chat/completions", [this](E e) { Generate(Endpoint::kChatCompletions, e); }});
  routes.push_back({"POST", "/v1/completions", [this](E e) { Generate(Endpoint::kCompletions, e); }});
  routes.push_back({"GET", "/v1/models", [this](E e) { Models(e); }});
  routes.push_back({"POST", "/tokenize", [this](E e) { Tokenize(e); }});
  routes.push_back({"POST", "/detokenize", [this](E e) { Detokenize(e); }});
  routes.push_back({"GET", "/health", [this](E e) { Health(e); }, /*authorize=*/false});
  return routes;
}

std::optional<httpd::Response> Server::Authorize(const httpd::Request& head) const {
  if (!options_.api_keys) return std::nullopt;
  const absl::string_view header = head.Header("Authorization");
  std::optional<absl::string_view> token = ApiKeys::BearerToken(header);
  if (token && options_.api_keys->Match(*token)) return std::nullopt;
  return JsonResponse(401, ErrorBody({.status = 401,
                                      .message = header.empty() ? "this server needs an API key: send "
                                                                  "Authorization: Bearer KEY"
                                                                : "the API key is not valid",
                                      .type = "authentication_error",
                                      .code = "invalid_api_key"}));
}

void Server::CheckModel(const std::string& model, Endpoint endpoint, std::shared_ptr<httpd::Exchange> exchange,
                        std::function<void(std::string served)> then) {
  client_.ModelInfo([model, endpoint, exchange, then = std::move(then)](const grpc::Status& s, v1::ModelInfo& info) {
    if (!s.ok()) return AnswerError(*exchange, ErrorOf(s, endpoint));
    if (model.empty() || model == info.model_name()) return then(info.model_name());
    AnswerError(*exchange, {.status = 404,
                            .message = absl::StrCat("the model `", Shortened(model), "` does not exist; this server ",
                                                    "serves `", info.model_name(), "` (GET /v1/models)"),
                            .type = "not_found_error",
                            .param = "model",
                            .code = "model_not_found"});
  });
}

void Server::Generate(Endpoint endpoint, std::shared_ptr<httpd::Exchange> exchange) {
  absl::StatusOr<OpenAiRequest> parsed = ParseRequest(endpoint, exchange->request().body);
  // A large body's JSON values (tens of bytes of heap per byte of body) are
  // gone now; hand their pages back rather than keep the peak (a 3 MB chat
  // of 100,000 messages left 120 MB resident).
  if (exchange->request().body.size() >= kTrimAfterBodyBytes) malloc_trim(0);
  if (!parsed.ok()) return AnswerError(*exchange, ErrorOf(parsed.status(), endpoint));
  if (const size_t bytes = parsed->grpc.ByteSizeLong(); bytes > kMaxGrpcRequestBytes) {
    return AnswerError(*exchange, {.status = 413,
                                   .message = absl::StrCat("the request is ", bytes, " bytes as a gRPC message; the ",
                                                           "coordinator takes at most ", kMaxGrpcRequestBytes,
                                                           ": send a shorter prompt, fewer messages or smaller tools"),
                                   .type = "invalid_request_error"});
  }
  // Whose request it is: the coordinator counts caps, admission, request ids
  // and aborts by this name. Only with a key of its own to the coordinator,
  // which must list that key in --trusted-fronts: a coordinator without keys
  // cannot tell this front from anyone else, so it is told no names.
  if (options_.api_keys && !options_.coordinator_api_key.empty()) {
    const std::optional<absl::string_view> token = ApiKeys::BearerToken(exchange->request().Header("Authorization"));
    parsed->client = options_.api_keys->Match(token.value_or("")).value_or("");
  }
  // X-Request-Id: the request's id, scoped by that client as over gRPC.
  parsed->grpc.set_request_id(std::string(exchange->request().Header("X-Request-Id")));
  ResponseHead head{.endpoint = endpoint, .created = absl::ToUnixSeconds(absl::Now()),
                    .include_usage = parsed->include_usage};
  auto request = std::make_shared<OpenAiRequest>(*std::move(parsed));
  CheckModel(request->model, endpoint, exchange, [this, exchange, request, head](std::string served) mutable {
    head.model = std::move(served);
    StartGenerateCall(client_, exchange, std::move(*request), std::move(head));
  });
}

void Server::Models(std::shared_ptr<httpd::Exchange> exchange) {
  client_.ModelInfo([exchange](const grpc::Status& s, v1::ModelInfo& info) {
    if (!s.ok()) return AnswerError(*exchange, ErrorOf(s, Endpoint::kCompletions));
    AnswerJson(*exchange, 200,
               {{"object", "list"},
                {"data", json::array({{{"id", info.model_name()},
                                       {"object", "model"},
                                       {"created", 0},
                                       {"owned_by", "tpserve"},
                                       {"max_model_len", info.max_model_len()}}})}});
  });
}

void Server::Tokenize(std::shared_ptr<httpd::Exchange> exchange) {
  std::string model;
  absl::StatusOr<v1::TokenizeRequest> request = ParseTokenizeRequest(exchange->request().body, &model);
  if (!request.ok()) return AnswerError(*exchange, ErrorOf(request.status(), Endpoint::kChatCompletions));
  auto tokenize = std::make_shared<v1::TokenizeRequest>(*std::move(request));
  CheckModel(model, Endpoint::kCompletions, exchange, [this, exchange, tokenize](std::string) {
    client_.Tokenize(std::move(*tokenize), [this, exchange](const grpc::Status& s, v1::TokenizeResponse& response) {
      if (!s.ok()) return AnswerError(*exchange, ErrorOf(s, Endpoint::kChatCompletions));
      std::vector<uint32_t> ids(response.token_ids().begin(), response.token_ids().end());
      client_.ModelInfo([exchange, ids = std::move(ids)](const grpc::Status&, v1::ModelInfo& info) {
        AnswerJson(*exchange, 200, {{"count", ids.size()}, {"max_model_len", info.max_model_len()}, {"tokens", ids}});
      });
    });
  });
}

void Server::Detokenize(std::shared_ptr<httpd::Exchange> exchange) {
  std::string model;
  absl::StatusOr<v1::DetokenizeRequest> request = ParseDetokenizeRequest(exchange->request().body, &model);
  if (!request.ok()) return AnswerError(*exchange, ErrorOf(request.status(), Endpoint::kCompletions));
  auto detokenize = std::make_shared<v1::DetokenizeRequest>(*std::move(request));
  CheckModel(model, Endpoint::kCompletions, exchange, [this, exchange, detokenize](std::string) {
    client_.Detokenize(std::move(*detokenize), [exchange](const grpc::Status& s, v1::DetokenizeResponse& response) {
      if (!s.ok()) return AnswerError(*exchange, ErrorOf(s, Endpoint::kCompletions));
      AnswerJson(*exchange, 200, {{"prompt", response.text()}});
    });
  });
}

void Server::Health(std::shared_ptr<httpd::Exchange> exchange) {
  auto answer = [exchange](bool ok) { AnswerJson(*exchange, ok ? 200 : 503, {{"status", ok ? "ok" : "unavailable"}}); };
  if (!options_.healthy) return answer(true);
  options_.healthy(std::move(answer));
}

}  // namespace tpserve::http
