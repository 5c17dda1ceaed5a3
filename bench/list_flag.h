// The benchmarks' list flags: comma-separated numbers (--batches 1,8,64,
// --replay-p 0,0.2,0.5,1). One parser for every bench, which each kept its own
// copy; a value that is not a list of numbers ends the program naming the flag.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace tpserve::bench {

// `value` split at commas, each item read whole as a T (int, int64_t, double);
// an empty value is an empty list (--replay-p "" turns the replay off). An empty
// item, a trailing character or a number out of T's range exits 2 with
// "FLAG: ..." on stderr.
template <typename T>
std::vector<T> ParseListFlag(std::string_view flag, std::string_view value) {
  std::vector<T> out;
  if (value.empty()) return out;
  size_t begin = 0;
  while (begin <= value.size()) {
    const size_t end = std::min(value.find(',', begin), value.size());
    const std::string_view item = value.substr(begin, end - begin);
    T v{};
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
      std::fprintf(stderr, "%.*s: '%.*s' is not a comma-separated list of numbers (item '%.*s')\n",
                   static_cast<int>(flag.size()), flag.data(), static_cast<int>(value.size()), value.data(),
                   static_cast<int>(item.size()), item.data());
      std::exit(2);
    }
    out.push_back(v);
    begin = end + 1;
  }
  return out;
}

}  // namespace tpserve::bench
