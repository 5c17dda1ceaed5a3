// A raw HTTP/1.1 client for httpd's tests: exact bytes out, responses parsed
// just enough to check them (status, fields, body by Content-Length, chunked
// or close). Blocking sockets with a receive timeout, so no test can hang.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace tpserve::httpd::testing {

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // chunked framing removed
  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawClient {
 public:
  // Connects to 127.0.0.1:port; reads time out after `timeout`.
  explicit RawClient(int port, absl::Duration timeout = absl::Seconds(10));
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Sends all of `bytes`; false when the connection is broken.
  bool Send(const std::string& bytes);
  void ShutdownWrite();  // a half-close
  // The next response; nullopt on timeout or when the connection ends first.
  std::optional<RawResponse> Read();
  // True when the server closes the connection (EOF or reset) within `within`.
  bool ClosedWithin(absl::Duration within);
  // Bytes read past the last response (a stream's raw chunks, say), reading
  // until `n` are there or `within` passes.
  std::string ReadRaw(size_t n, absl::Duration within);

 private:
  bool Fill(absl::Time deadline);  // reads more into buffer_; false on EOF, error or timeout
  bool Line(std::string* line, absl::Time deadline);
  bool Exactly(size_t n, std::string* out, absl::Time deadline);

  int fd_ = -1;
  absl::Duration timeout_;
  std::string buffer_;
};

}  // namespace tpserve::httpd::testing
