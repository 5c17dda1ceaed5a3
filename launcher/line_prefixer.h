// Splits one rank's output stream into lines and puts a prefix ("[rank 1] ")
// in front of each, so the output of N ranks interleaves line by line, never
// mid-line. A line longer than max_line is cut into max_line pieces, each
// prefixed, so one rank that never writes '\n' cannot grow memory unbounded.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tpserve {

class LinePrefixer {
 public:
  explicit LinePrefixer(std::string prefix, size_t max_line = 64 * 1024);

  // Takes more bytes; returns every line now complete, each prefixed and ending
  // in '\n' (empty when no line is complete yet).
  std::string Feed(std::string_view bytes);
  // At end of stream: the unterminated last line, prefixed, with '\n' added
  // (empty when the stream ended on a line boundary).
  std::string Flush();

 private:
  std::string prefix_;
  size_t max_line_;
  std::string partial_;  // bytes after the last '\n', < max_line_
};

}  // namespace tpserve
