#include "tests/httpd/raw_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"

namespace tpserve::httpd::testing {

RawClient::RawClient(int port, absl::Duration timeout) : timeout_(timeout) {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

RawClient::~RawClient() {
  if (fd_ >= 0) close(fd_);
}

bool RawClient::Send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

void RawClient::ShutdownWrite() { shutdown(fd_, SHUT_WR); }

bool RawClient::Fill(absl::Time deadline) {
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    const int ready = poll(&p, 1, static_cast<int>(ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    char chunk[16384];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
}

bool RawClient::Line(std::string* line, absl::Time deadline) {
  for (;;) {
    const size_t end = buffer_.find("\r\n");
    if (end != std::string::npos) {
      *line = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      return true;
    }
    if (!Fill(deadline)) return false;
  }
}

bool RawClient::Exactly(size_t n, std::string* out, absl::Time deadline) {
  while (buffer_.size() < n) {
    if (!Fill(deadline)) return false;
  }
  *out = buffer_.substr(0, n);
  buffer_.erase(0, n);
  return true;
}

std::optional<RawResponse> RawClient::Read() {
  const absl::Time deadline = absl::Now() + timeout_;
  RawResponse r;
  std::string line;
  do {  // interim responses (100 Continue) come before the final one
    if (!Line(&line, deadline) || line.size() < 12 || !absl::SimpleAtoi(line.substr(9, 3), &r.status)) {
      return std::nullopt;
    }
    r.headers.clear();
    for (;;) {
      if (!Line(&line, deadline)) return std::nullopt;
      if (line.empty()) break;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) return std::nullopt;
      r.headers[absl::AsciiStrToLower(line.substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  } while (r.status / 100 == 1);
  if (r.headers.count("content-length")) {
    size_t n = 0;
    if (!absl::SimpleAtoi(r.headers["content-length"], &n) || !Exactly(n, &r.body, deadline)) return std::nullopt;
  } else if (absl::AsciiStrToLower(r.Header("transfer-encoding")) == "chunked") {
    for (;;) {
      size_t n = 0;
      if (!Line(&line, deadline) || !absl::SimpleHexAtoi(line, &n)) return std::nullopt;
      std::string data;
      if (!Exactly(n + 2, &data, deadline)) return std::nullopt;
      if (n == 0) break;
      r.body += data.substr(0, n);
    }
  } else {
    while (Fill(deadline)) {
    }
    r.body = std::move(buffer_);
    buffer_.clear();
  }
  return r;
}

bool RawClient::ClosedWithin(absl::Duration within) {
  const absl::Time deadline = absl::Now() + within;
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
    char chunk[16384];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return true;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

std::string RawClient::ReadRaw(size_t n, absl::Duration within) {
  const absl::Time deadline = absl::Now() + within;
  while (buffer_.size() < n && Fill(deadline)) {
  }
  std::string out = std::move(buffer_);
  buffer_.clear();
  return out;
}

}  // namespace tpserve::httpd::testing
