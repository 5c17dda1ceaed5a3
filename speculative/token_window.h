// TokenWindow: the last `capacity` tokens of a sequence, by absolute position.
//
//   positions:  [begin(), end())  the tokens held; end() - begin() <= capacity
//   at(p):      token at absolute position p, begin() <= p < end()
//
// A ring of capacity slots (a power of two, so at() is a mask): Push past the
// capacity drops the oldest token, begin() advances by one. Memory is
// capacity * 4 bytes whatever the sequence's length.
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"

namespace tpserve::speculative {

class TokenWindow {
 public:
  // capacity >= 1, rounded up to a power of two.
  explicit TokenWindow(int64_t capacity) {
    TPSERVE_CHECK(capacity >= 1);
    int64_t c = 1;
    while (c < capacity) c <<= 1;
    ring_.resize(static_cast<size_t>(c));
    mask_ = c - 1;
    capacity_ = capacity;
  }

  int64_t begin() const { return end_ - size(); }
  int64_t end() const { return end_; }
  int64_t size() const { return end_ < capacity_ ? end_ : capacity_; }
  int64_t capacity() const { return capacity_; }
  bool full() const { return end_ >= capacity_; }

  int64_t memory_bytes() const { return static_cast<int64_t>(ring_.capacity() * sizeof(int32_t)); }

  int32_t at(int64_t p) const { return ring_[static_cast<size_t>(p & mask_)]; }
  void Push(int32_t token) { ring_[static_cast<size_t>(end_++ & mask_)] = token; }

 private:
  std::vector<int32_t> ring_;  // [power of two >= capacity]
  int64_t mask_ = 0;
  int64_t capacity_ = 0;
  int64_t end_ = 0;  // tokens pushed in all
};

}  // namespace tpserve::speculative
