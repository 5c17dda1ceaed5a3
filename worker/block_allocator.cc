#include "worker/block_allocator.h"

#include "absl/strings/str_cat.h"

namespace tpserve {

BlockAllocator::BlockAllocator(int64_t num_blocks) : in_use_(static_cast<size_t>(num_blocks)) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t BlockAllocator::BlocksFor(int64_t num_tokens, int32_t block_size) {
  return (num_tokens + block_size - 1) / block_size;
}

absl::StatusOr<std::vector<int32_t>> BlockAllocator::Allocate(int64_t count) {
  if (count < 0 || count > num_free()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache: ", count, " blocks requested, ",
                                                     num_free(), " of ", num_blocks(),
                                                     " free; give the engine more blocks"));
  }
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(b)] = true;
    out.push_back(b);
  }
  return out;
}

absl::Status BlockAllocator::Free(const std::vector<int32_t>& blocks) {
  std::vector<bool> seen(in_use_.size());
  for (int32_t b : blocks) {
    if (b < 0 || b >= num_blocks() || !in_use_[static_cast<size_t>(b)] ||
        seen[static_cast<size_t>(b)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("BlockAllocator::Free: block ", b, " is not allocated (", num_blocks(),
                       " blocks); it was freed twice or never allocated"));
    }
    seen[static_cast<size_t>(b)] = true;
  }
  for (int32_t b : blocks) {
    in_use_[static_cast<size_t>(b)] = false;
    free_.push_back(b);
  }
  return absl::OkStatus();
}

}  // namespace tpserve
