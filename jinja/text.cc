// Text with per-byte origin. See jinja/text.h.
#include "jinja/text.h"

#include <algorithm>

namespace tpserve::jinja {

void Text::Append(std::string_view s, bool trusted) {
  if (s.empty()) return;
  str_.append(s);
  if (!runs_.empty() && runs_.back().trusted == trusted) {
    runs_.back().end = str_.size();
  } else {
    runs_.push_back({str_.size(), trusted});
  }
}

void Text::Append(const Text& other) {
  size_t begin = 0;
  for (const Run& r : other.runs_) {
    Append(std::string_view(other.str_).substr(begin, r.end - begin), r.trusted);
    begin = r.end;
  }
}

Text Text::Slice(size_t begin, size_t end) const {
  Text out;
  size_t run_begin = 0;
  for (const Run& r : runs_) {
    const size_t b = std::max(begin, run_begin);
    const size_t e = std::min(end, r.end);
    if (b < e) out.Append(std::string_view(str_).substr(b, e - b), r.trusted);
    run_begin = r.end;
    if (run_begin >= end) break;
  }
  return out;
}

bool Text::AllTrusted() const {
  for (const Run& r : runs_) {
    if (!r.trusted) return false;
  }
  return true;
}

}  // namespace tpserve::jinja
