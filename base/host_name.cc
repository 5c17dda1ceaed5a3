#include "base/host_name.h"

#include <unistd.h>

namespace tpserve {

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace tpserve

namespace tpserve {

bool IsLoopbackAddress(std::string_view address) {
  if (address.substr(0, 5) == "unix:") return true;
  const size_t colon = address.rfind(':');
  std::string_view host = colon == std::string_view::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8 written as four decimal parts.
  if (host.substr(0, 4) != "127.") return false;
  int parts = 0;
  size_t i = 0;
  while (i <= host.size()) {
    size_t end = host.find('.', i);
    if (end == std::string_view::npos) end = host.size();
    const std::string_view part = host.substr(i, end - i);
    if (part.empty() || part.size() > 3) return false;
    int value = 0;
    for (char c : part) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    if (value > 255) return false;
    ++parts;
    i = end + 1;
  }
  return parts == 4;
}

}  // namespace tpserve
