#include "coordinator/generation_service.h"

#include <sys/random.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <random>
#include <span>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "coordinator/grpc_status.h"
#include "coordinator/wire.h"

namespace tpserve {


namespace {

// A unary call answered inline: the default reactor, finished with `status`.
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

// The metrics' figures into GetServerInfo's answer.
void FillTotals(const CoordinatorMetrics::Totals& t, v1::ServerInfo& info) {
  info.set_kv_cache_usage(t.kv_cache_usage);
  for (const auto& [reason, n] : t.requests_finished) (*info.mutable_requests_finished())[reason] = n;
  info.set_requests_failed(t.requests_failed);
  info.set_prompt_tokens_total(t.prompt_tokens);
  info.set_generation_tokens_total(t.generation_tokens);
  info.set_num_preemptions_total(t.preemptions);
  info.set_prefix_cache_queries_total(t.prefix_cache_queries);
  info.set_prefix_cache_hits_total(t.prefix_cache_hits);
  info.set_spec_decode_num_drafts(t.spec_drafts);
  info.set_spec_decode_num_draft_tokens(t.spec_draft_tokens);
  info.set_spec_decode_num_accepted_tokens(t.spec_accepted_tokens);
  info.set_spec_decode_num_pipelined_drafts(t.spec_pipelined_drafts);
  for (uint64_t n : t.spec_accepted_per_pos) info.add_spec_decode_num_accepted_tokens_per_pos(n);
  for (const CoordinatorMetrics::Totals::Histogram& h : t.histograms) {
    v1::HistogramTotals* out = info.add_histograms();
    out->set_name(h.name);
    out->set_count(h.count);
    out->set_sum(h.sum);
  }
}

// A unary method on the wire: parse, `answer` (with the caller's identity
// when `caller` is OK), serialize, finish.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const grpc::ByteBuffer& in,
                                grpc::ByteBuffer* out, const absl::StatusOr<std::string>& caller,
                                absl::FunctionRef<absl::Status(const std::string&, const Request&, Response*)> answer) {
  Request request;
  Response response;
  absl::Status status = caller.status();
  if (status.ok()) status = ParseRequest(in, &request);
  if (status.ok()) status = answer(*caller, request, &response);
  if (status.ok()) status = SerializeResponse(response, out);
  return Answer(context, ToGrpc(status));
}

}  // namespace

std::string ClientIdentity(std::string_view peer) {
  // "ipv4:1.2.3.4:PORT", "ipv6:[::1]:PORT"; anything else ("unix:PATH") is kept whole.
  const size_t colon = peer.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == peer.size()) return std::string(peer);
  const std::string_view port = peer.substr(colon + 1);
  for (char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::string(peer);
  }
  const std::string_view host = peer.substr(0, colon);
  if (!host.starts_with("ipv4:") && !host.starts_with("ipv6:")) return std::string(peer);
  return std::string(host);
}

std::string NewRequestId() {
  char bytes[16];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    std::random_device device;  // /dev/urandom or the CPU's generator
    for (size_t i = 0; i < sizeof(bytes); i += 4) {
      const uint32_t r = device();
      for (size_t k = 0; k < 4; ++k) bytes[i + k] = static_cast<char>(r >> (8 * k));
    }
  }
  return absl::StrCat("req-", absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes))));
}

// One Generate call. The call has one "turn" (the right to take from the queue
// and to write), held by exactly one of: the constructor, the write in flight
// (until OnWriteDone), the queue while parked (until it calls on_ready, on the
// output thread that pushed), or OnCancel when it takes a parked turn back
// (Cancel). Pump runs only with the turn, so there is never more than one
// write outstanding and response_ and wire_ are never written to while a
// write reads them. Pump's last action
// is StartWrite or Finish: after either, OnDone may delete this at once on
// another thread. gRPC runs OnWriteDone, OnCancel and OnDone holding a
// reference to the call, so OnDone never runs while one of them does.
class GenerationService::GenerateReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateReactor(GenerationService& service, grpc::CallbackServerContext* context,
                  const grpc::ByteBuffer& wire)
      : service_(service),
        context_(context),
        queue_(std::make_shared<ResponseQueue>(service.max_buffered_chunks_, [this] { Pump(); })) {
    absl::StatusOr<std::string> client = service.Caller(*context);
    absl::Status open = client.ok() ? service.OpenStream(*client) : client.status();
    if (!open.ok()) {
      Finish(ToGrpc(open));
      return;
    }
    client_ = *std::move(client);
    v1::GenerateRequest request;
    if (absl::Status parsed = ParseRequest(wire, &request); !parsed.ok()) {
      Finish(ToGrpc(parsed));
      return;
    }
    absl::StatusOr<Submitted> submitted = service.Submit(request, client_, queue_);
    if (!submitted.ok()) {
      Finish(ToGrpc(submitted.status()));
      return;
    }
    engine_ = submitted->engine;
    request_id_ = std::move(submitted->request_id);
    completes_left_ = std::max<uint32_t>(1, request.n());
    Pump();  // the constructor's turn: write what is there already, else park
  }

  void OnWriteDone(bool ok) override {
    if (!ok) Stop(absl::CancelledError("the client went away"));
    Pump();  // the finished write's turn
  }

  void OnCancel() override {
    if (engine_ == nullptr) return;  // refused before submission: finished already
    const bool deadline = context_->deadline() <= std::chrono::system_clock::now();
    const ResponseQueue::CancelResult cancelled =
        Stop(deadline ? absl::DeadlineExceededError("the deadline passed")
                      : absl::CancelledError("the client cancelled"));
    if (cancelled.consumer_waiting) Pump();  // the parked turn is ours now: Finish
  }

  void OnDone() override {
    if (!client_.empty()) service_.CloseStream(client_);
    delete this;
  }

 private:
  // The client went away: drop what is buffered and abort the request unless
  // the engine ended it already.
  ResponseQueue::CancelResult Stop(const absl::Status& why) {
    const ResponseQueue::CancelResult cancelled = queue_->Cancel(why);
    if (cancelled.producer_open) engine_->Abort(client_, request_id_, why);
    return cancelled;
  }

  // With the turn: writes the next response, finishes the call, or parks.
  // Whoever holds the turn runs it: the constructor, OnWriteDone, OnCancel,
  // or an output thread's push that found the queue parked (on_ready).
  void Pump() {
    absl::Status end;
    // response_ is taken into again and again: the queue's merged chunk
    // trades buffers with it, so a chunk allocates nothing here.
    v1::GenerateResponse& response = response_;
    switch (queue_->TryPop(&response, &end, /*merge_chunks=*/true)) {
      case ResponseQueue::Next::kMessage:
        if (absl::Status serialized = SerializeResponse(response, &wire_); !serialized.ok()) {
          Stop(serialized);
          Finish(ToGrpc(serialized));
          return;
        }
        // The last choice's Complete is the last message and the call then
        // ends OK: both go in one batch, so a client whose deadline is near
        // never sees the Complete followed by DEADLINE_EXCEEDED.
        if (response.has_complete() && --completes_left_ == 0) {
          StartWriteAndFinish(&wire_, grpc::WriteOptions(), grpc::Status::OK);
          return;
        }
        StartWrite(&wire_);
        return;
      case ResponseQueue::Next::kEnd:
        Finish(ToGrpc(end));
        return;
      case ResponseQueue::Next::kTimeout:
        return;  // parked: the queue calls Pump when a response or the end arrives
    }
  }

  GenerationService& service_;
  grpc::CallbackServerContext* const context_;
  std::string client_;  // whose request this is (Caller); set once counted by OpenStream
  const std::shared_ptr<ResponseQueue> queue_;  // shared with the engine loop
  // Set by the constructor after a successful Submit (null: refused), before
  // gRPC can call OnWriteDone or OnCancel.
  EngineGroups* engine_ = nullptr;
  std::string request_id_;
  uint32_t completes_left_ = 1;    // choices (GenerateRequest.n) whose Complete is still to come
  v1::GenerateResponse response_;  // the last response taken (Pump)
  grpc::ByteBuffer wire_;          // the write in flight, serialized
};

// One SubscribeKvEvents call: the publisher's batches (kv_events.h), queued
// serialized and written one at a time. The publisher calls Push (the engine
// thread; for the first batches, this constructor's thread); gRPC the rest. At
// most kMaxQueued batches wait: one more ends the call RESOURCE_EXHAUSTED.
class GenerationService::KvEventsReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  static constexpr size_t kMaxQueued = 4096;

  KvEventsReactor(GenerationService& service, grpc::CallbackServerContext* context, const grpc::ByteBuffer& wire) {
    v1::KvEventsRequest request;
    absl::Status status = service.Caller(*context).status();
    if (status.ok()) status = ParseRequest(wire, &request);
    std::vector<KvEventPublisher*> publishers;
    if (status.ok()) {
      absl::MutexLock lock(&service.mu_);
      // Every data-parallel group's events, each batch naming its group (dp_rank); seqs are per group.
      for (int g = 0; service.engine_ != nullptr && g < service.engine_->size(); ++g) {
        if (KvEventPublisher* p = service.engine_->group(g).kv_events()) publishers.push_back(p);
      }
      if (publishers.empty()) status = absl::UnavailableError("the server is starting: no engine yet");
    }
    if (!status.ok()) {
      EndWith(status);
      return;
    }
    for (KvEventPublisher* p : publishers) {
      subscriptions_.emplace_back(p, p->Subscribe(request.from_seq(), [this](const v1::KvEventBatch& batch) {
        Push(batch);
      }));
    }
  }

  void OnWriteDone(bool ok) override {
    if (!ok) EndWith(absl::CancelledError("the client went away"));  // finished below: a write was in flight
    bool start = false;
    std::optional<absl::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (!ended_ && !queued_.empty()) {
        wire_ = std::move(queued_.front());
        queued_.pop_front();
        start = true;
      } else {
        writing_ = false;
        if (ended_ && !finished_) {
          finished_ = true;
          finish = end_;
        }
      }
    }
    if (start) StartWrite(&wire_);
    if (finish) Finish(ToGrpc(*finish));
  }

  void OnCancel() override { EndWith(absl::CancelledError("the client cancelled")); }

  void OnDone() override {
    for (const auto& [publisher, id] : subscriptions_) publisher->Unsubscribe(id);
    delete this;
  }

 private:
  // No more writes: finishes now when none is in flight, else OnWriteDone does.
  void EndWith(absl::Status why) {
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return;
      ended_ = true;
      end_ = std::move(why);
      if (writing_ || finished_) return;
      finished_ = true;
    }
    Finish(ToGrpc(end_));
  }

  void Push(const v1::KvEventBatch& batch) {
    grpc::ByteBuffer buffer;
    if (absl::Status s = SerializeResponse(batch, &buffer); !s.ok()) {
      EndWith(s);
      return;
    }
    bool start = false, full = false;
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return;
      full = queued_.size() >= kMaxQueued;
      if (!full) queued_.push_back(std::move(buffer));
      if (!full && !writing_) {
        writing_ = true;  // the write turn is ours: wire_ is free
        wire_ = std::move(queued_.front());
        queued_.pop_front();
        start = true;
      }
    }
    if (full) {
      EndWith(absl::ResourceExhaustedError(absl::StrCat(
          "SubscribeKvEvents: the client fell ", kMaxQueued, " batches behind; subscribe again with from_seq")));
    }
    if (start) StartWrite(&wire_);
  }

  std::vector<std::pair<KvEventPublisher*, uint64_t>> subscriptions_;  // one per group: publisher, id
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queued_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;   // a write is in flight (wire_)
  bool ended_ ABSL_GUARDED_BY(mu_) = false;     // no more writes: end_ says why
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish was called (or is being)
  absl::Status end_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer wire_;  // the write in flight: touched only by whoever set writing_
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::SubscribeKvEvents(grpc::CallbackServerContext* context,
                                                                                 const grpc::ByteBuffer* request) {
  return new KvEventsReactor(*this, context, *request);
}

GenerationService::GenerationService(const Tokenizer& tokenizer,
                                     absl::StatusOr<ChatTemplate> chat_format, RequestLimits limits,
                                     ServiceInfo info, int64_t max_buffered_chunks)
    : tokenizer_(tokenizer),
      chat_format_(std::move(chat_format)),
      limits_(std::move(limits)),
      info_(std::move(info)),
      max_buffered_chunks_(max_buffered_chunks) {}

void GenerationService::SetEngine(EngineGroups* engine, std::vector<std::string> workers,
                                  std::string backend) {
  absl::MutexLock lock(&mu_);
  engine_ = engine;
  workers_ = std::move(workers);
  backend_ = std::move(backend);
}

void GenerationService::SetAccess(AccessOptions access) { access_ = std::move(access); }

absl::StatusOr<std::string> GenerationService::Caller(const grpc::CallbackServerContext& context) const {
  absl::StatusOr<std::string> caller = Authenticated(context);
  if (!caller.ok()) return caller;
  const auto& metadata = context.client_metadata();
  const auto named = metadata.find(kClientNameMetadata);
  if (named == metadata.end()) return caller;
  const bool trusted = access_.api_keys && std::find(access_.trusted_fronts.begin(), access_.trusted_fronts.end(),
                                                     *caller) != access_.trusted_fronts.end();
  if (!trusted) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the metadata ", kClientNameMetadata, " names the client a trusted front calls for; this caller (",
        *caller, ") is not one of the coordinator's --trusted-fronts; list the front's key name there, "
        "or leave the metadata out"));
  }
  const absl::string_view name(named->second.data(), named->second.size());
  if (name.empty() || name.size() > 128 ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c < 0x7f; })) {
    return absl::InvalidArgumentError(absl::StrCat(kClientNameMetadata, ": 1 to 128 printable characters, no spaces"));
  }
  return absl::StrCat(*caller, "/", name);
}

absl::StatusOr<std::string> GenerationService::Authenticated(const grpc::CallbackServerContext& context) const {
  if (!access_.api_keys) return ClientIdentity(context.peer());
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "this server needs an API key: send the metadata \"authorization: Bearer KEY\" (tpserve-client --api-key-file)");
  }
  const std::optional<absl::string_view> token =
      ApiKeys::BearerToken(absl::string_view(it->second.data(), it->second.size()));
  std::optional<std::string> name = token ? access_.api_keys->Match(*token) : std::nullopt;
  if (!name) return absl::UnauthenticatedError("the API key is not valid (the authorization metadata must be \"Bearer KEY\")");
  return *std::move(name);
}

absl::Status GenerationService::OpenStream(const std::string& client) {
  absl::MutexLock lock(&mu_);
  int& open = open_streams_[client];
  if (access_.max_streams_per_client > 0 && open >= access_.max_streams_per_client) {
    if (open == 0) open_streams_.erase(client);
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client already has ", open, " open streams, the most --max-streams-per-client allows; ",
        "wait for one to end"));
  }
  ++open;
  return absl::OkStatus();
}

void GenerationService::CloseStream(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = open_streams_.find(client);
  if (it != open_streams_.end() && --it->second <= 0) open_streams_.erase(it);
}

int GenerationService::open_streams(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  auto it = open_streams_.find(client);
  return it == open_streams_.end() ? 0 : it->second;
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
    if (permanent_) return;  // draining: a late loss or recovery must not reopen the doors
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

absl::StatusOr<GenerationService::Submitted> GenerationService::Submit(
    const v1::GenerateRequest& request, const std::string& client,
    std::shared_ptr<ResponseQueue> queue) {
  if (request.request_id().size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request_id: ", request.request_id().size(), " bytes is longer than the limit of ",
        kMaxRequestIdBytes, "; use a shorter id, or leave it empty for the server to assign one"));
  }
  Submitted submitted;
  submitted.request_id = request.request_id();
  {
    absl::MutexLock lock(&mu_);
    if (!availability_.ok()) return availability_;
    if (engine_ == nullptr) return absl::UnavailableError("the server is starting: no engine yet");
    submitted.engine = engine_;
  }
  if (submitted.request_id.empty()) submitted.request_id = NewRequestId();
  if (request.has_chat() && !chat_format_.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat: this model's chat format is unknown: ", chat_format_.status().message()));
  }
  absl::StatusOr<PreparedRequest> prepared =
      PrepareRequest(request, tokenizer_, chat_format_.value_or(ChatFormat::kChatML), limits_);
  if (!prepared.ok()) return prepared.status();
  TPSERVE_RETURN_IF_ERROR(
      submitted.engine->Submit(client, submitted.request_id, std::move(*prepared), std::move(queue)));
  return submitted;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(grpc::CallbackServerContext* context,
                                                                       const grpc::ByteBuffer* request) {
  return new GenerateReactor(*this, context, *request);
}

grpc::ServerUnaryReactor* GenerationService::Abort(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Unary<v1::AbortRequest, v1::AbortResponse>(
      context, *request, response, Caller(*context),
      [this](const std::string& client, const v1::AbortRequest& r, v1::AbortResponse* out) {
        return AbortInto(client, r, out);
      });
}

absl::Status GenerationService::AbortInto(const std::string& client, const v1::AbortRequest& request,
                                          v1::AbortResponse* response) {
  EngineGroups* engine;
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
  }
  // Only the caller's own request: ids are scoped by client.
  response->set_found(engine != nullptr && engine->Abort(client, request.request_id(), absl::OkStatus()));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return Unary<v1::ModelInfoRequest, v1::ModelInfo>(
      context, *request, response, Caller(*context),
      [this](const std::string&, const v1::ModelInfoRequest&, v1::ModelInfo* out) {
        *out = info_.model;
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* GenerationService::GetServerInfo(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return Unary<v1::ServerInfoRequest, v1::ServerInfo>(
      context, *request, response, Caller(*context),
      [this](const std::string&, const v1::ServerInfoRequest&, v1::ServerInfo* out) { return ServerInfoInto(out); });
}

absl::Status GenerationService::ServerInfoInto(v1::ServerInfo* response) const {
  EngineGroups* engine;
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
    // The groups summed; the hit rate is the groups' mean.
    EngineStats total;
    for (int g = 0; g < engine->size(); ++g) {
      const EngineStats s = engine->group(g).stats();
      total.num_blocks += s.num_blocks;
      total.free_blocks += s.free_blocks;
      total.running += s.running;
      total.waiting += s.waiting;
      total.prefix_cache_hit_rate += s.prefix_cache_hit_rate / engine->size();
    }
    response->set_num_blocks(static_cast<uint64_t>(total.num_blocks));
    response->set_free_blocks(static_cast<uint64_t>(total.free_blocks));
    response->set_running(static_cast<uint32_t>(total.running));
    response->set_waiting(static_cast<uint32_t>(total.waiting));
    response->set_prefix_cache_hit_rate(total.prefix_cache_hit_rate);
    if (const CoordinatorMetrics* metrics = engine->group(0).metrics()) FillTotals(metrics->totals(), *response);
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* GenerationService::GetLoads(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Unary<v1::LoadsRequest, v1::Loads>(
      context, *request, response, Caller(*context),
      [this](const std::string&, const v1::LoadsRequest&, v1::Loads* out) { return LoadsInto(out); });
}

absl::Status GenerationService::LoadsInto(v1::Loads* response) const {
  EngineGroups* engine;
  bool serving;
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
    serving = availability_.ok() && engine_ != nullptr;
  }
  response->set_block_size(info_.block_size);
  for (int g = 0; g < (engine != nullptr ? engine->size() : 1); ++g) {
    v1::GroupLoad* group = response->add_groups();
    group->set_dp_rank(static_cast<uint32_t>(g));
    // A group whose workers are lost (being replaced) is not serving while the others are.
    group->set_serving(serving && engine != nullptr && engine->router().available(g));
    if (engine == nullptr) continue;
    const EngineStats s = engine->group(g).stats();
    group->set_running(static_cast<uint32_t>(s.running));
    group->set_waiting(static_cast<uint32_t>(s.waiting));
    group->set_kv_blocks_used(static_cast<uint64_t>(s.num_blocks - s.free_blocks));
    group->set_kv_blocks_total(static_cast<uint64_t>(s.num_blocks));
    group->set_tokens_in_flight(static_cast<uint64_t>(s.tokens_in_flight));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Unary<v1::TokenizeRequest, v1::TokenizeResponse>(
      context, *request, response, Caller(*context),
      [this](const std::string&, const v1::TokenizeRequest& r, v1::TokenizeResponse* out) {
        return TokenizeInto(r, out);
      });
}

absl::Status GenerationService::TokenizeInto(const v1::TokenizeRequest& request,
                                             v1::TokenizeResponse* response) const {
  // The same encoding as Generate's (special tokens in the text stay text
  // unless the request allows them).
  TPSERVE_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, EncodeTokenizeRequest(request, tokenizer_, chat_format_,
                                                                                 limits_.max_chat_messages));
  for (int32_t id : ids) response->add_token_ids(static_cast<uint32_t>(id));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Unary<v1::DetokenizeRequest, v1::DetokenizeResponse>(
      context, *request, response, Caller(*context),
      [this](const std::string&, const v1::DetokenizeRequest& r, v1::DetokenizeResponse* out) {
        return DetokenizeInto(r, out);
      });
}

absl::Status GenerationService::DetokenizeInto(const v1::DetokenizeRequest& request,
                                               v1::DetokenizeResponse* response) const {
  // A model's vocabulary may be larger than its tokenizer's (Qwen3: 151,936
  // rows for 151,669 tokens). The ids between are padding the model can still
  // rank (a log-prob's top tokens): they decode as nothing. Ids past the
  // model's vocabulary (past int32: outside every one) are refused; Decode names them.
  const int32_t padding_from = tokenizer_.vocab_size();
  auto padding = [&](int32_t id) { return id >= padding_from && id < limits_.vocab_size; };
  std::vector<int32_t> ids, decoded;
  ids.reserve(static_cast<size_t>(request.token_ids_size()));
  for (uint32_t id : request.token_ids()) {
    ids.push_back(id > INT32_MAX ? -1 : static_cast<int32_t>(id));
    if (!padding(ids.back())) decoded.push_back(ids.back());
  }
  absl::StatusOr<std::string> text = tokenizer_.Decode(decoded, request.skip_special_tokens());
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("token_ids: ", text.status().message()));
  response->set_text(*std::move(text));
  if (!request.pieces()) return absl::OkStatus();
  for (int32_t id : ids) {
    if (padding(id)) {
      response->add_pieces();
      continue;
    }
    TPSERVE_ASSIGN_OR_RETURN(std::string piece, tokenizer_.Decode(std::span<const int32_t>(&id, 1), false));
    response->add_pieces(std::move(piece));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
