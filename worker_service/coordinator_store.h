// CoordinatorStore: the rendezvous Store (comm/store.h) over the coordinator's
// StoreSet / StoreGet RPCs (worker.proto), so the collectives of the workers
// meet through the coordinator: no extra port, no shared file system
// (docs/architecture.md, "Start-up", point 2).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/store.h"
#include "tpserve/internal/v1/worker.grpc.pb.h"

namespace tpserve {

class CoordinatorStore final : public Store {
 public:
  // `stub` is a Worker stub on the coordinator's channel; `address` names the
  // coordinator in error messages; `token` is this session's store token
  // (auth/cluster_secret.h), sent with every call ("" = none).
  CoordinatorStore(std::shared_ptr<tpserve::internal::v1::Worker::StubInterface> stub, std::string address,
                   std::string token = "")
      : stub_(std::move(stub)), address_(std::move(address)), token_(std::move(token)) {}

  // UNAVAILABLE naming the coordinator when the RPC fails.
  absl::Status Set(std::string_view key, std::string_view value) override;
  // The coordinator waits up to `timeout` for the key: DEADLINE_EXCEEDED naming
  // the key when it never comes; UNAVAILABLE when the coordinator is gone.
  absl::StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;

 private:
  void Authorize(grpc::ClientContext& context) const;

  std::shared_ptr<tpserve::internal::v1::Worker::StubInterface> stub_;
  std::string address_;
  std::string token_;
};

}  // namespace tpserve
