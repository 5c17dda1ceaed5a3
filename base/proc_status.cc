#include "base/proc_status.h"

#include <charconv>
#include <fstream>
#include <string>

namespace tpserve {

int64_t ProcStatusKb(std::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.size() <= field.size() || line.compare(0, field.size(), field) != 0 || line[field.size()] != ':') {
      continue;
    }
    size_t begin = field.size() + 1;
    while (begin < line.size() && (line[begin] == ' ' || line[begin] == '\t')) ++begin;
    int64_t kb = -1;
    const auto [end, ec] = std::from_chars(line.data() + begin, line.data() + line.size(), kb);
    return ec == std::errc() ? kb : -1;
  }
  return -1;
}

}  // namespace tpserve
