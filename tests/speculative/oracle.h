// Brute-force answers for the proposers' tests and fuzzer: what the
// incremental structures must agree with, computed from the whole token list.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace tpserve::speculative::oracle {

// NgramProposer::Propose over the window tokens[begin, end): for n = hi down
// to lo, the latest earlier occurrence (ending before end - 1, starting at or
// after begin) of the last n tokens; the up-to-k tokens that followed it.
inline std::vector<int32_t> NgramPropose(std::span<const int32_t> tokens, int64_t begin, int32_t lo, int32_t hi,
                                         int32_t k) {
  const int64_t end = static_cast<int64_t>(tokens.size());
  for (int32_t n = hi; n >= lo; --n) {
    if (end - n < begin) continue;
    for (int64_t last = end - 2; last - n + 1 >= begin; --last) {
      bool same = true;
      for (int32_t i = 0; i < n && same; ++i) same = tokens[last - i] == tokens[end - 1 - i];
      if (!same) continue;
      const int64_t r = std::min<int64_t>(k, end - 1 - last);
      return std::vector<int32_t>(tokens.begin() + last + 1, tokens.begin() + last + 1 + r);
    }
  }
  return {};
}

// Every string of 1..max_depth tokens inside tokens[begin, end) with its
// number of occurrences there.
inline std::map<std::vector<int32_t>, int64_t> Substrings(std::span<const int32_t> tokens, int64_t begin,
                                                          int32_t max_depth) {
  std::map<std::vector<int32_t>, int64_t> out;
  const int64_t end = static_cast<int64_t>(tokens.size());
  for (int64_t s = begin; s < end; ++s) {
    for (int64_t n = 1; n <= max_depth && s + n <= end; ++n) {
      ++out[std::vector<int32_t>(tokens.begin() + s, tokens.begin() + s + n)];
    }
  }
  return out;
}

// Whether `needle` occurs in `hay`.
inline bool Occurs(std::span<const int32_t> hay, std::span<const int32_t> needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

}  // namespace tpserve::speculative::oracle
