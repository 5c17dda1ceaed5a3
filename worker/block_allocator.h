// BlockAllocator: the offline engine's own KV block bookkeeping (a free list).
// In production the coordinator's block manager (with prefix caching) owns
// block allocation; this one only hands out and takes back block ids.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve {

class BlockAllocator {
 public:
  // Blocks 0 .. num_blocks - 1, all free.
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }

  // Number of blocks that hold `num_tokens` tokens: ceil(num_tokens / block_size).
  static int64_t BlocksFor(int64_t num_tokens, int32_t block_size);

  // Takes `count` free blocks (lowest ids first). RESOURCE_EXHAUSTED, taking
  // nothing, when fewer than `count` are free.
  absl::StatusOr<std::vector<int32_t>> Allocate(int64_t count);

  // Returns blocks to the free list. INVALID_ARGUMENT, freeing nothing, for an
  // id out of range or not currently allocated (a double free).
  absl::Status Free(const std::vector<int32_t>& blocks);

 private:
  std::vector<int32_t> free_;  // stack of free ids; the back is handed out next
  std::vector<bool> in_use_;   // [num_blocks]
};

}  // namespace tpserve
