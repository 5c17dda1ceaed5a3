// tpserve-http's side of the public gRPC API: the stub, the API key every
// call carries, the unary calls as callbacks (gRPC's callback API: no thread
// waits on a call), the cached model facts, and a count of the calls in
// flight so that shutdown can wait for them.
//
// Callbacks run on gRPC's threads and must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "http/openai_response.h"
#include "tpserve/v1/generation.grpc.pb.h"

namespace tpserve::http {

class CoordinatorClient {
 public:
  CoordinatorClient(std::shared_ptr<grpc::Channel> channel, std::string api_key);

  tpserve::v1::Generation::Stub& stub() { return *stub_; }
  // Adds the API key ("authorization: Bearer") when there is one.
  // With `client` (an HTTP caller's key name), the call is for that client
  // (kClientNameMetadata): the coordinator must list this front's key in
  // --trusted-fronts.
  void Prepare(grpc::ClientContext& context, const std::string& client = "") const;

  // A call in flight: Begin when it starts, End when its last callback is done.
  void Begin();
  void End();
  // True once no call is in flight; false after `timeout`.
  bool AwaitIdle(absl::Duration timeout);

  template <typename Response>
  using Done = std::function<void(const grpc::Status& status, Response& response)>;
  // The model facts, from the coordinator once and from the cache after.
  void ModelInfo(Done<tpserve::v1::ModelInfo> done);
  void Tokenize(tpserve::v1::TokenizeRequest request, Done<tpserve::v1::TokenizeResponse> done);
  void Detokenize(tpserve::v1::DetokenizeRequest request, Done<tpserve::v1::DetokenizeResponse> done);

  // The text of each token of `logprobs` (chosen and alternatives), for their
  // log-prob entries: one Detokenize call, or "token_id:N" when `as_ids`.
  void TokenTexts(const google::protobuf::RepeatedPtrField<tpserve::v1::TokenLogprob>& logprobs, bool as_ids,
                  std::function<void(absl::StatusOr<TokenText> texts)> done);

 private:
  const std::unique_ptr<tpserve::v1::Generation::Stub> stub_;
  const std::string api_key_;

  absl::Mutex mu_;
  std::optional<tpserve::v1::ModelInfo> model_info_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tpserve::http
