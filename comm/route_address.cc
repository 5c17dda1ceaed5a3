#include "comm/route_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// HOST and PORT of "HOST:PORT" / "[HOST]:PORT".
absl::Status SplitHostPort(absl::string_view peer, std::string* host, std::string* port) {
  const size_t colon = peer.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == peer.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", peer, "' is not HOST:PORT"));
  }
  absl::string_view h = peer.substr(0, colon);
  if (absl::StartsWith(h, "[") && absl::EndsWith(h, "]")) h = h.substr(1, h.size() - 2);
  *host = std::string(h);
  *port = std::string(peer.substr(colon + 1));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> LocalAddressToward(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:")) return std::string("127.0.0.1");
  std::string host, port;
  if (absl::Status s = SplitHostPort(peer, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  std::string local;
  for (addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage self{};
    socklen_t len = sizeof(self);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) != 0) {
      last_error = std::strerror(errno);
    } else {
      char text[INET6_ADDRSTRLEN] = {};
      const void* where = self.ss_family == AF_INET6
                              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&self)->sin6_addr)
                              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&self)->sin_addr);
      if (inet_ntop(self.ss_family, where, text, sizeof(text)) != nullptr) local = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (local.empty()) return absl::UnavailableError(absl::StrCat("no route to '", host, "': ", last_error));
  return local;
}

}  // namespace tpserve
