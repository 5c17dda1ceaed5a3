#include "launcher/line_prefixer.h"

#include <utility>

namespace tpserve {

LinePrefixer::LinePrefixer(std::string prefix, size_t max_line)
    : prefix_(std::move(prefix)), max_line_(max_line == 0 ? 1 : max_line) {}

std::string LinePrefixer::Feed(std::string_view bytes) {
  std::string out;
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const size_t room = max_line_ - partial_.size();
    if (nl != std::string_view::npos && nl < room) {
      out += prefix_;
      out += partial_;
      out.append(bytes.substr(0, nl + 1));
      partial_.clear();
      bytes.remove_prefix(nl + 1);
    } else if (bytes.size() >= room) {  // the line fills max_line_: emit this piece
      out += prefix_;
      out += partial_;
      out.append(bytes.substr(0, room));
      out += '\n';
      partial_.clear();
      bytes.remove_prefix(room);
    } else {
      partial_.append(bytes);
      bytes = {};
    }
  }
  return out;
}

std::string LinePrefixer::Flush() {
  if (partial_.empty()) return {};
  std::string out = prefix_ + partial_ + "\n";
  partial_.clear();
  return out;
}

}  // namespace tpserve
