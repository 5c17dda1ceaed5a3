#include "http/server.h"

#include <httplib.h>

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "http/openai_request.h"
#include "http/openai_response.h"

namespace tpserve::http {
namespace {

namespace v1 = tpserve::v1;
using nlohmann::json;

void Answer(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(Dump(body), "application/json");
}

void AnswerError(httplib::Response& response, const HttpError& error) {
  Answer(response, error.status, ErrorBody(error));
}

Endpoint EndpointOf(int endpoint) { return static_cast<Endpoint>(endpoint); }

}  // namespace

// One Generate call. The reader goes before the context it uses.
struct Server::Call {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  bool finished = false;  // Finish was called

  grpc::Status Finish() {
    finished = true;
    return reader->Finish();
  }
  // Ends the call early (the HTTP client went away): the coordinator frees the request.
  void Cancel() {
    if (finished) return;
    context.TryCancel();
    v1::GenerateResponse ignored;
    while (reader->Read(&ignored)) {
    }
    Finish();
  }
};

// What a streaming response has sent; the content provider's state.
struct Server::Stream {
  std::shared_ptr<Call> call;
  ResponseHead head;
  OpenAiRequest request;
  std::optional<v1::GenerateResponse> first;  // read before the headers went out
  bool sent_role = false;
  int64_t text_bytes = 0;  // completions' log-prob text offsets
};

Server::Server(std::shared_ptr<grpc::Channel> channel, ServerOptions options)
    : stub_(v1::Generation::NewStub(std::move(channel))),
      options_(std::move(options)),
      server_(std::make_unique<httplib::Server>()) {
  Route();
}

Server::~Server() = default;

absl::Status Server::Bind() {
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
  } else if (server_->bind_to_port(options_.host, options_.port)) {
    port_ = options_.port;
  }
  if (port_ <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen: cannot listen on ", options_.host, ":", options_.port,
                     " (in use, or not an address here)"));
  }
  return absl::OkStatus();
}

void Server::Run() { server_->listen_after_bind(); }
void Server::Stop() { server_->stop(); }

void Server::Context(grpc::ClientContext& context) const {
  if (!options_.coordinator_api_key.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.coordinator_api_key));
  }
}

bool Server::Authorized(const httplib::Request& request, httplib::Response& response) const {
  if (!options_.api_keys) return true;
  const std::string header = request.get_header_value("Authorization");
  std::optional<absl::string_view> token = ApiKeys::BearerToken(header);
  if (token && options_.api_keys->Match(*token)) return true;
  AnswerError(response, {.status = 401,
                         .message = header.empty() ? "this server needs an API key: send Authorization: Bearer KEY"
                                                   : "the API key is not valid",
                         .type = "authentication_error",
                         .code = "invalid_api_key"});
  return false;
}

void Server::Route() {
  const size_t max_body = options_.max_body_bytes;
  server_->set_payload_max_length(max_body);
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || Authorized(req, res)) return httplib::Server::HandlerResponse::Unhandled;
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own refusals (unknown path, body too large) in OpenAI's shape.
  server_->set_error_handler(httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req,
                                                                             httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    HttpError e{.status = res.status, .type = "invalid_request_error"};
    if (res.status == 413) {
      e.message = absl::StrCat("the body is larger than this server's --max-body-bytes (", max_body, " bytes)");
    } else if (res.status == 404) {
      e.message = absl::StrCat("no such endpoint: ", req.method, " ", req.path);
      e.type = "not_found_error";
    } else {
      e.message = absl::StrCat("HTTP ", res.status);
    }
    AnswerError(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    AnswerError(res, {.status = 500, .message = "internal error", .type = "server_error"});
  });
  server_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(static_cast<int>(Endpoint::kChatCompletions), req, res);
  });
  server_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(static_cast<int>(Endpoint::kCompletions), req, res);
  });
  server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { Models(res); });
  server_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { Tokenize(req, res); });
  server_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { Detokenize(req, res); });
  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = !options_.healthy || options_.healthy();
    Answer(res, ok ? 200 : 503, {{"status", ok ? "ok" : "unavailable"}});
  });
}

grpc::Status Server::ModelInfo(v1::ModelInfo* info) {
  {
    absl::MutexLock lock(&mu_);
    if (model_info_) {
      *info = *model_info_;
      return grpc::Status::OK;
    }
  }
  grpc::ClientContext context;
  Context(context);
  grpc::Status status = stub_->GetModelInfo(&context, v1::ModelInfoRequest(), info);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    model_info_ = *info;
  }
  return status;
}

bool Server::CheckModel(const std::string& model, int endpoint, std::string* served, httplib::Response& response) {
  v1::ModelInfo info;
  if (grpc::Status s = ModelInfo(&info); !s.ok()) {
    AnswerError(response, ErrorOf(s, EndpointOf(endpoint)));
    return false;
  }
  *served = info.model_name();
  if (model.empty() || model == info.model_name()) return true;
  AnswerError(response, {.status = 404,
                         .message = absl::StrCat("the model `", model, "` does not exist; this server serves `",
                                                 info.model_name(), "` (GET /v1/models)"),
                         .type = "not_found_error",
                         .param = "model",
                         .code = "model_not_found"});
  return false;
}

namespace {

// The text of each token of `logprobs` (chosen and alternatives) for their
// log-prob entries: one Detokenize call, or "token_id:N" without one.
absl::StatusOr<TokenText> TokenTexts(v1::Generation::Stub& stub, grpc::ClientContext& context,
                                     const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs,
                                     bool as_ids) {
  if (as_ids) return TokenText([](uint32_t id) { return absl::StrCat("token_id:", id); });
  v1::DetokenizeRequest request;
  request.set_pieces(true);
  for (const v1::TokenLogprob& lp : logprobs) {
    request.add_token_ids(lp.token_id());
    for (const v1::TopLogprob& t : lp.top()) request.add_token_ids(t.token_id());
  }
  v1::DetokenizeResponse response;
  grpc::Status s = stub.Detokenize(&context, request, &response);
  if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  auto texts = std::make_shared<std::map<uint32_t, std::string>>();
  for (int i = 0; i < request.token_ids_size() && i < response.pieces_size(); ++i) {
    (*texts)[request.token_ids(i)] = response.pieces(i);
  }
  return TokenText([texts](uint32_t id) {
    auto it = texts->find(id);
    return it == texts->end() ? absl::StrCat("token_id:", id) : it->second;
  });
}

// LogprobsJson of a chunk, or null when the request asked for none. An error
// naming the tokens' names is an INTERNAL one.
absl::StatusOr<json> ChunkLogprobs(v1::Generation::Stub& stub, const std::string& api_key, const OpenAiRequest& r,
                                   const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& logprobs,
                                   int64_t text_offset) {
  if (!r.logprobs) return json(nullptr);
  grpc::ClientContext context;
  if (!api_key.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", api_key));
  absl::StatusOr<TokenText> text_of = TokenTexts(stub, context, logprobs, r.tokens_as_ids);
  if (!text_of.ok()) return text_of.status();
  return LogprobsJson(r.endpoint, logprobs, *text_of, text_offset);
}

// Writes `data` to the stream; false when the client is gone.
bool Write(httplib::DataSink& sink, const std::string& data) { return sink.write(data.data(), data.size()); }

}  // namespace

void Server::Generate(int endpoint, const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<OpenAiRequest> parsed = ParseRequest(EndpointOf(endpoint), req.body);
  if (!parsed.ok()) return AnswerError(res, ErrorOf(parsed.status(), EndpointOf(endpoint)));
  ResponseHead head{.endpoint = EndpointOf(endpoint), .created = absl::ToUnixSeconds(absl::Now()),
                    .include_usage = parsed->include_usage};
  if (!CheckModel(parsed->model, endpoint, &head.model, res)) return;

  auto call = std::make_shared<Call>();
  Context(call->context);
  call->reader = stub_->Generate(&call->context, parsed->grpc);
  // The first response (or the error) before any header goes out, so a refused
  // request is an HTTP error rather than a stream that ends at once.
  v1::GenerateResponse response;
  if (!call->reader->Read(&response)) {
    grpc::Status s = call->Finish();
    if (s.ok()) s = grpc::Status(grpc::StatusCode::INTERNAL, "the coordinator ended the stream without a response");
    return AnswerError(res, ErrorOf(s, head.endpoint));
  }
  head.id = ResponseId(head.endpoint, response.request_id());
  if (parsed->stream) return StreamResponse(call, std::move(head), *std::move(parsed), std::move(response), res);

  std::string text;
  google::protobuf::RepeatedPtrField<v1::TokenLogprob> logprobs;
  std::optional<v1::Complete> complete;
  do {
    if (response.has_chunk()) {
      text += response.chunk().text();
      logprobs.MergeFrom(response.chunk().logprobs());
    } else if (response.has_complete()) {
      complete = response.complete();
    }
  } while (call->reader->Read(&response));
  grpc::Status s = call->Finish();
  if (!s.ok()) return AnswerError(res, ErrorOf(s, head.endpoint));
  if (!complete) {
    return AnswerError(res, {.status = 500, .message = "the stream ended without Complete", .type = "server_error"});
  }
  absl::StatusOr<json> lp = ChunkLogprobs(*stub_, options_.coordinator_api_key, *parsed, logprobs, 0);
  if (!lp.ok()) return AnswerError(res, ErrorOf(lp.status(), head.endpoint));
  Answer(res, 200, FullResponse(head, text, *lp, *complete));
}

void Server::StreamResponse(std::shared_ptr<Call> call, ResponseHead head, OpenAiRequest request,
                            v1::GenerateResponse first, httplib::Response& res) {
  auto stream = std::make_shared<Stream>();
  stream->call = std::move(call);
  stream->head = std::move(head);
  stream->request = std::move(request);
  stream->first = std::move(first);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, stream](size_t, httplib::DataSink& sink) { return StreamStep(*stream, sink); },
      [stream](bool success) {
        if (!success) stream->call->Cancel();
      });
}

// One step of a stream: the next gRPC response as SSE events. False ends the
// HTTP response early (the client is gone); sink.done() ends it normally.
bool Server::StreamStep(Stream& st, httplib::DataSink& sink) {
  const bool chat = st.head.endpoint == Endpoint::kChatCompletions;
  if (chat && !st.sent_role) {
    st.sent_role = true;
    return Write(sink, SseEvent(StreamChunk(st.head, std::string(), /*role=*/true, nullptr, std::nullopt)));
  }
  v1::GenerateResponse response;
  if (st.first) {
    response = *std::move(st.first);
    st.first.reset();
  } else if (!st.call->reader->Read(&response)) {
    // The stream ended without Complete: its status as an error event.
    grpc::Status s = st.call->Finish();
    if (s.ok()) s = grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without Complete");
    if (!Write(sink, SseEvent(ErrorBody(ErrorOf(s, st.head.endpoint)))) || !Write(sink, kSseDone)) return false;
    sink.done();
    return true;
  }
  if (response.has_chunk()) {
    const v1::Chunk& chunk = response.chunk();
    if (chunk.text().empty() && !st.request.logprobs) return true;
    absl::StatusOr<json> lp =
        ChunkLogprobs(*stub_, options_.coordinator_api_key, st.request, chunk.logprobs(), st.text_bytes);
    if (!lp.ok()) lp = json(nullptr);
    st.text_bytes += static_cast<int64_t>(chunk.text().size());
    return Write(sink, SseEvent(StreamChunk(st.head, chunk.text(), false, *lp, std::nullopt)));
  }
  if (!response.has_complete()) return true;
  const v1::Complete& c = response.complete();
  std::string out = SseEvent(StreamChunk(st.head, chat ? std::nullopt : std::optional<std::string>(""), false,
                                         nullptr, FinishReason(c.finish_reason())));
  if (st.head.include_usage) out += SseEvent(UsageChunk(st.head, c.usage()));
  out += kSseDone;
  v1::GenerateResponse rest;
  while (st.call->reader->Read(&rest)) {
  }
  st.call->Finish();
  if (!Write(sink, out)) return false;
  sink.done();
  return true;
}

void Server::Models(httplib::Response& res) {
  v1::ModelInfo info;
  if (grpc::Status s = ModelInfo(&info); !s.ok()) return AnswerError(res, ErrorOf(s, Endpoint::kCompletions));
  Answer(res, 200, {{"object", "list"},
                    {"data", json::array({{{"id", info.model_name()},
                                           {"object", "model"},
                                           {"created", 0},
                                           {"owned_by", "tpserve"},
                                           {"max_model_len", info.max_model_len()}}})}});
}

void Server::Tokenize(const httplib::Request& req, httplib::Response& res) {
  std::string model, served;
  absl::StatusOr<v1::TokenizeRequest> request = ParseTokenizeRequest(req.body, &model);
  if (!request.ok()) return AnswerError(res, ErrorOf(request.status(), Endpoint::kChatCompletions));
  if (!CheckModel(model, static_cast<int>(Endpoint::kCompletions), &served, res)) return;
  grpc::ClientContext context;
  Context(context);
  v1::TokenizeResponse response;
  if (grpc::Status s = stub_->Tokenize(&context, *request, &response); !s.ok()) {
    return AnswerError(res, ErrorOf(s, Endpoint::kChatCompletions));
  }
  v1::ModelInfo info;
  ModelInfo(&info);
  Answer(res, 200, {{"count", response.token_ids_size()},
                    {"max_model_len", info.max_model_len()},
                    {"tokens", std::vector<uint32_t>(response.token_ids().begin(), response.token_ids().end())}});
}

void Server::Detokenize(const httplib::Request& req, httplib::Response& res) {
  std::string model, served;
  absl::StatusOr<v1::DetokenizeRequest> request = ParseDetokenizeRequest(req.body, &model);
  if (!request.ok()) return AnswerError(res, ErrorOf(request.status(), Endpoint::kCompletions));
  if (!CheckModel(model, static_cast<int>(Endpoint::kCompletions), &served, res)) return;
  grpc::ClientContext context;
  Context(context);
  v1::DetokenizeResponse response;
  if (grpc::Status s = stub_->Detokenize(&context, *request, &response); !s.ok()) {
    return AnswerError(res, ErrorOf(s, Endpoint::kCompletions));
  }
  Answer(res, 200, {{"prompt", response.text()}});
}

}  // namespace tpserve::http
