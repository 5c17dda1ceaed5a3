#include "coordinator/wire.h"

#include <mutex>
#include <string>

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/slice.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"

namespace tpserve {

namespace {

// Where protobuf's log lines go while this thread parses a request (null:
// to the handler that was installed before ours, which prints them).
thread_local std::string* parse_log = nullptr;
google::protobuf::LogHandler* previous_handler = nullptr;

void CaptureParseLog(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
  if (parse_log != nullptr && level < google::protobuf::LOGLEVEL_FATAL) {
    *parse_log = message;
    return;
  }
  if (previous_handler != nullptr) previous_handler(level, file, line, message);
}

void InstallLogHandler() {
  static std::once_flag once;
  std::call_once(once, [] { previous_handler = google::protobuf::SetLogHandler(&CaptureParseLog); });
}

// "String field 'tpserve.v1.GenerateRequest.prompt' contains invalid UTF-8
// data ..." -> "tpserve.v1.GenerateRequest.prompt"; "" for any other line.
std::string Utf8Field(const std::string& log) {
  const std::string kStart = "String field '";
  const size_t start = log.find(kStart);
  if (start == std::string::npos || log.find("invalid UTF-8") == std::string::npos) return "";
  const size_t begin = start + kStart.size();
  const size_t end = log.find('\'', begin);
  return end == std::string::npos ? "" : log.substr(begin, end - begin);
}

// The path of the field named `full_name` from message `type`, as requests
// name their fields ("chat.messages.content" for tpserve.v1.ChatMessage.content
// in a GenerateRequest: which message is not known here); "" when none.
std::string FieldPath(const google::protobuf::Descriptor& type, const std::string& full_name, int depth = 0) {
  if (depth > 8) return "";  // the public messages nest 3 deep
  for (int i = 0; i < type.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& f = *type.field(i);
    if (f.full_name() == full_name) return f.name();
    if (f.message_type() == nullptr) continue;
    if (std::string rest = FieldPath(*f.message_type(), full_name, depth + 1); !rest.empty()) {
      return absl::StrCat(f.name(), ".", rest);
    }
  }
  return "";
}

}  // namespace

absl::Status ParseRequest(const grpc::ByteBuffer& wire, google::protobuf::Message* request) {
  InstallLogHandler();
  std::string log;
  parse_log = &log;
  grpc::ByteBuffer copy(wire);  // the reader consumes its buffer; this shares the slices
  grpc::ProtoBufferReader reader(&copy);
  const bool parsed = reader.status().ok() && request->ParseFromZeroCopyStream(&reader);
  parse_log = nullptr;
  if (parsed) return absl::OkStatus();
  const std::string type = request->GetDescriptor()->full_name();
  if (const std::string field = Utf8Field(log); !field.empty()) {
    const std::string path = FieldPath(*request->GetDescriptor(), field);
    return absl::InvalidArgumentError(absl::StrCat(
        path.empty() ? field : path,
        ": is not valid UTF-8; text fields must be UTF-8 (send raw token ids in prompt_token_ids)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("the request (", wire.Length(), " bytes) is not a valid ", type,
                                                 "; build it from proto/tpserve/v1/generation.proto"));
}

absl::Status SerializeResponse(const google::protobuf::Message& response, grpc::ByteBuffer* wire) {
  const size_t size = response.ByteSizeLong();
  if (size <= static_cast<size_t>(grpc::kProtoBufferWriterMaxBufferLength)) {
    // One slice, written once with the sizes just computed (a streamed chunk
    // is tens of bytes: the writer's stream would cost more than the copy).
    grpc::Slice slice(size);
    uint8_t* end = response.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(slice.begin()));
    if (static_cast<size_t>(end - slice.begin()) != size) {
      return absl::InternalError(absl::StrCat("cannot serialize a ", response.GetDescriptor()->full_name()));
    }
    grpc::ByteBuffer fresh(&slice, 1);
    wire->Swap(&fresh);
    return absl::OkStatus();
  }
  wire->Clear();
  grpc::ProtoBufferWriter writer(wire, grpc::kProtoBufferWriterMaxBufferLength, static_cast<int>(size));
  if (!response.SerializeToZeroCopyStream(&writer)) {
    return absl::InternalError(absl::StrCat("cannot serialize a ", response.GetDescriptor()->full_name()));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
