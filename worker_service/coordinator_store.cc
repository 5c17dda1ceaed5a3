#include "worker_service/coordinator_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "auth/cluster_secret.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {
namespace iv1 = tpserve::internal::v1;

void CoordinatorStore::Authorize(grpc::ClientContext& context) const {
  if (!token_.empty()) context.AddMetadata(kStoreTokenMetadata, token_);
}

absl::Status CoordinatorStore::Set(std::string_view key, std::string_view value) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  Authorize(context);
  iv1::StoreSetRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  iv1::StoreSetResponse response;
  const grpc::Status s = stub_->StoreSet(&context, request, &response);
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("rendezvous: StoreSet of key \"", std::string(key), "\" at the coordinator ",
                                             address_, " failed: ", s.error_message()));
}

absl::StatusOr<std::string> CoordinatorStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  const int64_t ms = std::clamp<int64_t>(timeout.count(), 1, int64_t{UINT32_MAX});
  grpc::ClientContext context;
  // The coordinator answers by `timeout`; the RPC deadline leaves it room.
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms) + std::chrono::seconds(10));
  Authorize(context);
  iv1::StoreGetRequest request;
  request.set_key(std::string(key));
  request.set_timeout_ms(static_cast<uint32_t>(ms));
  iv1::StoreGetResponse response;
  const grpc::Status s = stub_->StoreGet(&context, request, &response);
  if (s.ok()) return std::move(*response.mutable_value());
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || s.error_code() == grpc::StatusCode::NOT_FOUND) {
    return absl::DeadlineExceededError(absl::StrCat("rendezvous: key \"", std::string(key), "\" was not set at the coordinator ",
                                                    address_, " within ", ms, " ms (", s.error_message(),
                                                    "); is every worker rank running?"));
  }
  return absl::UnavailableError(absl::StrCat("rendezvous: StoreGet of key \"", std::string(key), "\" at the coordinator ",
                                             address_, " failed: ", s.error_message()));
}

}  // namespace tpserve
