// absl::Status -> grpc::Status at the coordinator's gRPC boundary: the codes
// share their numbers, the message is kept.
#pragma once

#include <string>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tpserve {

inline grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace tpserve
