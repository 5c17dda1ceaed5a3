// The public API's messages on the wire. GenerationService registers its
// methods raw (bytes in, bytes out) so that a request which does not parse is
// answered INVALID_ARGUMENT saying why (gRPC's generated handlers answer a
// bare UNIMPLEMENTED, and protobuf logs a line per such request).
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace tpserve {

// Parses `wire` into `request`. INVALID_ARGUMENT naming the field when a
// string field is not UTF-8 ("tpserve.v1.GenerateRequest.prompt is not valid
// UTF-8 ..."), or the message type when the bytes are not that message at
// all. Protobuf's own error line for the request is not logged.
absl::Status ParseRequest(const grpc::ByteBuffer& wire, google::protobuf::Message* request);

// `response` serialized into `wire` (INTERNAL if it cannot be).
absl::Status SerializeResponse(const google::protobuf::Message& response, grpc::ByteBuffer* wire);

}  // namespace tpserve
