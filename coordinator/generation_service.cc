#include "coordinator/generation_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/grpc_status.h"

namespace tpserve {

namespace v1 = tpserve::v1;

namespace {

// How often a waiting Generate looks whether its client went away.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(20);

}  // namespace

GenerationService::GenerationService(const Tokenizer& tokenizer,
                                     absl::StatusOr<ChatFormat> chat_format, RequestLimits limits,
                                     ServiceInfo info)
    : tokenizer_(tokenizer),
      chat_format_(std::move(chat_format)),
      limits_(std::move(limits)),
      info_(std::move(info)) {}

void GenerationService::SetEngine(EngineLoop* engine, std::vector<std::string> workers,
                                  std::string backend) {
  absl::MutexLock lock(&mu_);
  engine_ = engine;
  workers_ = std::move(workers);
  backend_ = std::move(backend);
}

void GenerationService::SetOnServingChange(std::function<void(bool)> callback) {
  absl::MutexLock lock(&mu_);
  on_serving_ = std::move(callback);
}

void GenerationService::SetAvailability(absl::Status availability, bool permanent) {
  std::function<void(bool)> callback;
  bool serving;
  {
    absl::MutexLock lock(&mu_);
    if (permanent_) return;  // a lost worker stays the reason: draining must not hide it
    permanent_ = permanent;
    availability_ = std::move(availability);
    serving = availability_.ok() && engine_ != nullptr;
    callback = on_serving_;
  }
  if (callback) callback(serving);
}

absl::Status GenerationService::availability() const {
  absl::MutexLock lock(&mu_);
  return availability_;
}

grpc::Status GenerationService::Generate(grpc::ServerContext* context,
                                         const v1::GenerateRequest* request,
                                         grpc::ServerWriter<v1::GenerateResponse>* writer) {
  EngineLoop* engine;
  std::string request_id = request->request_id();
  {
    absl::MutexLock lock(&mu_);
    if (!availability_.ok()) return ToGrpc(availability_);
    engine = engine_;
    if (request_id.empty()) request_id = absl::StrCat("req-", next_id_++);
  }
  if (request->has_chat() && !chat_format_.ok()) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("chat: this model's chat format is unknown: ", chat_format_.status().message())));
  }
  absl::StatusOr<PreparedRequest> prepared =
      PrepareRequest(*request, tokenizer_, chat_format_.value_or(ChatFormat::kChatML), limits_);
  if (!prepared.ok()) return ToGrpc(prepared.status());

  auto queue = std::make_shared<ResponseQueue>();
  if (absl::Status s = engine->Submit(request_id, std::move(*prepared), queue); !s.ok()) {
    return ToGrpc(s);
  }
  v1::GenerateResponse response;
  absl::Status end;
  while (true) {
    switch (queue->Pop(kCancelPoll, &response, &end)) {
      case ResponseQueue::Next::kMessage:
        if (!writer->Write(response)) {
          engine->Abort(request_id, absl::CancelledError("the client went away"));
          return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
        }
        break;
      case ResponseQueue::Next::kEnd:
        return ToGrpc(end);
      case ResponseQueue::Next::kTimeout:
        if (context->IsCancelled()) {
          const bool deadline = context->deadline() <= std::chrono::system_clock::now();
          engine->Abort(request_id, deadline ? absl::DeadlineExceededError("the deadline passed")
                                             : absl::CancelledError("the client cancelled"));
          return deadline ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline passed")
                          : grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled");
        }
        break;
    }
  }
}

grpc::Status GenerationService::Abort(grpc::ServerContext*, const v1::AbortRequest* request,
                                      v1::AbortResponse* response) {
  EngineLoop* engine;
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
  }
  response->set_found(engine != nullptr && engine->Abort(request->request_id(), absl::OkStatus()));
  return grpc::Status::OK;
}

grpc::Status GenerationService::GetModelInfo(grpc::ServerContext*, const v1::ModelInfoRequest*,
                                             v1::ModelInfo* response) {
  *response = info_.model;
  return grpc::Status::OK;
}

grpc::Status GenerationService::GetServerInfo(grpc::ServerContext*, const v1::ServerInfoRequest*,
                                              v1::ServerInfo* response) {
  EngineLoop* engine;
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
    for (const std::string& w : workers_) response->add_workers(w);
    response->set_backend(backend_);
  }
  response->set_version(info_.version);
  response->set_tensor_parallel_size(info_.tensor_parallel_size);
  response->set_block_size(info_.block_size);
  if (engine != nullptr) {
    const EngineStats s = engine->stats();
    response->set_num_blocks(static_cast<uint64_t>(s.num_blocks));
    response->set_free_blocks(static_cast<uint64_t>(s.free_blocks));
    response->set_running(static_cast<uint32_t>(s.running));
    response->set_waiting(static_cast<uint32_t>(s.waiting));
    response->set_prefix_cache_hit_rate(s.prefix_cache_hit_rate);
  }
  return grpc::Status::OK;
}

grpc::Status GenerationService::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* request,
                                         v1::TokenizeResponse* response) {
  std::vector<int32_t> ids;
  if (request->has_chat()) {
    if (!chat_format_.ok()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "chat: this model's chat format is unknown: ", chat_format_.status().message())));
    }
    absl::StatusOr<std::vector<int32_t>> chat = EncodeChat(request->chat(), tokenizer_, *chat_format_);
    if (!chat.ok()) return ToGrpc(chat.status());
    ids = std::move(*chat);
  } else {
    ids = tokenizer_.Encode(request->text(), request->add_special_tokens());
  }
  for (int32_t id : ids) response->add_token_ids(static_cast<uint32_t>(id));
  return grpc::Status::OK;
}

}  // namespace tpserve
