// The public tpserve.v1.Generation service over the engine loop, on gRPC's
// callback API: no thread per call (docs/architecture.md, "Threads and locks").
//
// Generate validates and tokenizes on the gRPC thread that delivers the call
// (INVALID_ARGUMENT naming the field) and submits to the engine loop; from then
// on the call is a reactor (GenerateReactor in generation_service.cc) fed by
// its ResponseQueue: its output thread's push wakes it when it is idle (the
// write then starts on that thread), it has at most one write outstanding and
// starts the next from OnWriteDone, with the chunks that came meanwhile
// merged into one message. No write starts on the engine thread. A client
// that cancels or whose deadline passes (OnCancel), or whose write fails, has
// its request aborted at the next step (blocks freed). A client that stops
// reading gets at most `max_buffered_chunks` responses buffered, then its
// stream ends with RESOURCE_EXHAUSTED naming --max-buffered-chunks.
// The unary RPCs run inline on the gRPC thread. Every RPC but Tokenize and
// GetModelInfo answers UNAVAILABLE unless the server is serving (starting,
// draining, or a worker lost: the reason is the message). GetLoads answers in
// every state, each group saying whether it is serving.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "auth/api_keys.h"
#include "coordinator/engine_groups.h"
#include "coordinator/engine_loop.h"
#include "coordinator/request.h"
#include "coordinator/response_queue.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tpserve/v1/generation.grpc.pb.h"

namespace tpserve {

// The longest request_id a client may choose (it is repeated in every response).
inline constexpr size_t kMaxRequestIdBytes = 256;

// Who a call comes from without API keys: the peer's address without its port
// ("ipv4:10.0.0.7", "ipv6:[::1]"), from grpc::ServerContext::peer()
// ("ipv4:10.0.0.7:51234"). With keys it is the key's name (AccessOptions).
// Request ids are scoped by the client: a client's id collides only with its
// own ids, Abort ends only its own requests, and the stream cap is per client.
std::string ClientIdentity(std::string_view peer);

// Who may call, and how much one client may hold open.
struct AccessOptions {
  // Set: every RPC needs "authorization: Bearer KEY" with one of these keys
  // (UNAUTHENTICATED otherwise), and the client is the key's name.
  std::optional<ApiKeys> api_keys;
  // Generate streams one client may have open at once; one more is
  // RESOURCE_EXHAUSTED naming --max-streams-per-client. 0 = no cap.
  int max_streams_per_client = 0;
  // Names of api_keys whose calls may name the client they are for
  // (kClientNameMetadata, auth/api_keys.h): a front such as tpserve-http,
  // which authenticates its own callers. Such a call's client is
  // "FRONT/NAME", so caps, fair admission, request ids and Abort work per
  // caller of the front, and a front cannot speak for a direct client. The
  // metadata from any other caller is PERMISSION_DENIED.
  std::vector<std::string> trusted_fronts;
};

// A fresh server-assigned request id: "req-" and 128 random bits as 32 hex
// digits, from the OS's CSPRNG (unguessable, so not a handle on anyone's stream).
std::string NewRequestId();

struct ServiceInfo {
  tpserve::v1::ModelInfo model;
  std::string version;
  uint32_t tensor_parallel_size = 0;
  uint32_t block_size = 0;
};

// Every method raw (coordinator/wire.h): a request that does not parse gets
// INVALID_ARGUMENT saying why.
using RawGenerationService = tpserve::v1::Generation::WithRawCallbackMethod_Generate<
    tpserve::v1::Generation::WithRawCallbackMethod_Abort<tpserve::v1::Generation::WithRawCallbackMethod_GetModelInfo<
        tpserve::v1::Generation::WithRawCallbackMethod_GetServerInfo<
            tpserve::v1::Generation::WithRawCallbackMethod_Tokenize<
                tpserve::v1::Generation::WithRawCallbackMethod_Detokenize<
                    tpserve::v1::Generation::WithRawCallbackMethod_GetLoads<
                        tpserve::v1::Generation::WithRawCallbackMethod_SubscribeKvEvents<
                            tpserve::v1::Generation::Service>>>>>>>>;

class GenerationService final : public RawGenerationService {
 public:
  // `chat_format` is an error (said to chat requests) when the model's format
  // is unknown. `tokenizer` must outlive the service. `max_buffered_chunks`
  // (>= 1, --max-buffered-chunks): responses held for a stream whose client
  // is not reading before its request is aborted with RESOURCE_EXHAUSTED.
  GenerationService(const Tokenizer& tokenizer, absl::StatusOr<ChatTemplate> chat_format,
                    RequestLimits limits, ServiceInfo info,
                    int64_t max_buffered_chunks = ResponseQueue::kDefaultMaxBuffered);

  // Starts serving with `engines` (the data-parallel groups' engine loops
  // behind their router; must outlive the service), its workers
  // ("rank 0: host device (pid P)") and the backend they run.
  void SetEngine(EngineGroups* engines, std::vector<std::string> workers, std::string backend);
  // OK: serving; otherwise every Generate gets this status (UNAVAILABLE).
  // After a permanent one (draining) later calls change nothing.
  void SetAvailability(absl::Status availability, bool permanent = false);
  absl::Status availability() const;
  // Called with true/false as the server starts or stops serving (health).
  void SetOnServingChange(std::function<void(bool)> callback);
  // Before the server starts.
  void SetAccess(AccessOptions access);
  // Open Generate streams of `client` (tests, metrics).
  int open_streams(const std::string& client) const;

  // The gRPC methods: each parses its request (ParseRequest) and answers
  // through the typed method below it.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetLoads(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* SubscribeKvEvents(grpc::CallbackServerContext* context,
                                                                const grpc::ByteBuffer* request) override;

 private:
  class GenerateReactor;  // one Generate call (generation_service.cc)
  class KvEventsReactor;  // one SubscribeKvEvents call (generation_service.cc)
  struct Submitted {
    EngineGroups* engine = nullptr;
    std::string request_id;  // the client's, or NewRequestId()
  };
  // Refuses unless serving, names the request, prepares it (PrepareRequest)
  // and submits it to the engine loop as `client`'s, with `queue` as its stream.
  absl::StatusOr<Submitted> Submit(const tpserve::v1::GenerateRequest& request,
                                   const std::string& client,
                                   std::shared_ptr<ResponseQueue> queue);
  // The unary methods' answers, for the caller `client` (Caller).
  absl::Status AbortInto(const std::string& client, const tpserve::v1::AbortRequest& request,
                         tpserve::v1::AbortResponse* response);
  absl::Status ServerInfoInto(tpserve::v1::ServerInfo* response) const;
  // Each data-parallel group's load, by dp_rank;
  // serving false and zeros before the engine starts.
  absl::Status LoadsInto(tpserve::v1::Loads* response) const;
  absl::Status TokenizeInto(const tpserve::v1::TokenizeRequest& request,
                            tpserve::v1::TokenizeResponse* response) const;
  absl::Status DetokenizeInto(const tpserve::v1::DetokenizeRequest& request,
                              tpserve::v1::DetokenizeResponse* response) const;
  // The caller's client identity (AccessOptions: a trusted front's caller is
  // "FRONT/NAME"), or UNAUTHENTICATED, PERMISSION_DENIED (the client named by
  // a caller that is no trusted front), INVALID_ARGUMENT (a malformed name).
  absl::StatusOr<std::string> Caller(const grpc::CallbackServerContext& context) const;
  // Who presents the call: its API key's name, or without keys its address.
  absl::StatusOr<std::string> Authenticated(const grpc::CallbackServerContext& context) const;
  // Counts a stream of `client` against its cap (RESOURCE_EXHAUSTED when full);
  // each OK is matched by one CloseStream.
  absl::Status OpenStream(const std::string& client);
  void CloseStream(const std::string& client);

  const Tokenizer& tokenizer_;
  absl::StatusOr<ChatTemplate> chat_format_;
  RequestLimits limits_;
  ServiceInfo info_;
  const int64_t max_buffered_chunks_;

  mutable absl::Mutex mu_;
  EngineGroups* engine_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<std::string> workers_ ABSL_GUARDED_BY(mu_);
  std::string backend_ ABSL_GUARDED_BY(mu_);
  absl::Status availability_ ABSL_GUARDED_BY(mu_) =
      absl::UnavailableError("the server is starting: waiting for the workers to load the model");
  bool permanent_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(bool)> on_serving_ ABSL_GUARDED_BY(mu_);
  AccessOptions access_;  // set before serving, then read-only
  absl::flat_hash_map<std::string, int> open_streams_ ABSL_GUARDED_BY(mu_);  // by client
};

}  // namespace tpserve
