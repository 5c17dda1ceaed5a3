#include "base/host_name.h"

#include <unistd.h>

namespace tpserve {

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace tpserve
