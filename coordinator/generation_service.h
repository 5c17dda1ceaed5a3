// The public tpserve.v1.Generation service over the engine loop.
//
// Generate validates and tokenizes on the gRPC thread (INVALID_ARGUMENT naming
// the field), submits to the engine loop, then forwards the request's
// responses. While it waits it watches the call: a client that cancels or whose
// deadline passes has its request aborted at the next step (blocks freed).
// Every RPC but Tokenize and GetModelInfo answers UNAVAILABLE unless the server
// is serving (starting, draining, or a worker lost: the reason is the message).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/engine_loop.h"
#include "coordinator/request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tpserve/v1/generation.grpc.pb.h"

namespace tpserve {

struct ServiceInfo {
  tpserve::v1::ModelInfo model;
  std::string version;
  uint32_t tensor_parallel_size = 0;
  uint32_t block_size = 0;
};

class GenerationService final : public tpserve::v1::Generation::Service {
 public:
  // `chat_format` is an error (said to chat requests) when the model's format
  // is unknown. `tokenizer` must outlive the service.
  GenerationService(const Tokenizer& tokenizer, absl::StatusOr<ChatFormat> chat_format,
                    RequestLimits limits, ServiceInfo info);

  // Starts serving with `engine` (must outlive the service), its workers
  // ("rank 0: host device (pid P)") and the backend they run.
  void SetEngine(EngineLoop* engine, std::vector<std::string> workers, std::string backend);
  // OK: serving; otherwise every Generate gets this status (UNAVAILABLE).
  // After a permanent one (a worker lost) later calls change nothing.
  void SetAvailability(absl::Status availability, bool permanent = false);
  absl::Status availability() const;
  // Called with true/false as the server starts or stops serving (health).
  void SetOnServingChange(std::function<void(bool)> callback);

  grpc::Status Generate(grpc::ServerContext* context, const tpserve::v1::GenerateRequest* request,
                        grpc::ServerWriter<tpserve::v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* context, const tpserve::v1::AbortRequest* request,
                     tpserve::v1::AbortResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const tpserve::v1::ModelInfoRequest* request,
                            tpserve::v1::ModelInfo* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context,
                             const tpserve::v1::ServerInfoRequest* request,
                             tpserve::v1::ServerInfo* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const tpserve::v1::TokenizeRequest* request,
                        tpserve::v1::TokenizeResponse* response) override;

 private:
  const Tokenizer& tokenizer_;
  absl::StatusOr<ChatFormat> chat_format_;
  RequestLimits limits_;
  ServiceInfo info_;

  mutable absl::Mutex mu_;
  EngineLoop* engine_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<std::string> workers_ ABSL_GUARDED_BY(mu_);
  std::string backend_ ABSL_GUARDED_BY(mu_);
  absl::Status availability_ ABSL_GUARDED_BY(mu_) =
      absl::UnavailableError("the server is starting: waiting for the workers to load the model");
  bool permanent_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(bool)> on_serving_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tpserve
