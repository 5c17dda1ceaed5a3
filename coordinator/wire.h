// The public API's messages on the wire. GenerationService registers its
// methods raw (bytes in, bytes out) so that a request which does not parse is
// answered INVALID_ARGUMENT saying why (gRPC's generated handlers answer a
// bare UNIMPLEMENTED, and protobuf logs a line per such request).
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace tpserve {

// Parses `wire` into `request`. INVALID_ARGUMENT starting with the field's
// path when a string field is not UTF-8 ("prompt: is not valid UTF-8 ...",
// "chat.messages.content: ..." without the index, which protobuf does not
// say), or naming the message type when the bytes are not that message at
// all (no field to name). Protobuf's own error line is not logged.
absl::Status ParseRequest(const grpc::ByteBuffer& wire, google::protobuf::Message* request);

// `response` serialized into `wire` (INTERNAL if it cannot be).
absl::Status SerializeResponse(const google::protobuf::Message& response, grpc::ByteBuffer* wire);

}  // namespace tpserve
