// KvCache: this rank's slice of the paged KV cache, one KvCacheLayer per layer.
//
// Per layer (docs/architecture.md, "KV cache"):
//   K, V: [num_blocks, block_size, local_kv_heads, head_dim]  (backend compute dtype)
// Token position p of a sequence lives in block table[p / block_size] at offset
// p % block_size; its slot is block * block_size + offset. Block ids come from
// the caller (coordinator or offline engine); Backend::BeginStep rejects ids and
// slots outside [0, num_blocks) / [0, num_blocks * block_size).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/backend.h"

namespace tpserve {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int32_t block_size = 0;
  int64_t num_kv_heads = 0;  // local KV heads on this rank
  int64_t head_dim = 0;
};

// Bytes one block takes on this rank: K and V of every layer.
//   2 * num_layers * block_size * num_kv_heads * head_dim * DTypeSize(dtype)
// (shape.num_blocks is ignored). The memory profile divides free memory by this.
int64_t KvCacheBytesPerBlock(const KvCacheShape& shape, DType dtype);

class KvCache {
 public:
  // Allocates K and V for every layer on `backend` in its compute dtype,
  // zero-filled by Backend::Allocate's contract (an unwritten slot must never
  // hold NaN garbage that a masked-out attention weight of 0 would turn into
  // NaN). INVALID_ARGUMENT naming the field for a non-positive dimension;
  // RESOURCE_EXHAUSTED naming the layer, the bytes asked and the bytes free
  // when the device cannot hold the cache.
  static absl::StatusOr<KvCache> Allocate(Backend& backend, const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  int64_t num_blocks() const { return shape_.num_blocks; }
  int32_t block_size() const { return shape_.block_size; }
  int64_t num_layers() const { return shape_.num_layers; }
  // The views the backend's StoreKv / Attention take for `layer`.
  KvCacheLayer layer(int64_t layer) const;
  // Copies block `src` to block `dst` (every layer's K and V) on `backend`,
  // the one that allocated the cache: device copies on its stream, ordered
  // with the step's ops, no host round trip (copy-on-write, step_plan.h's
  // BlockCopyPlan). Both ids must lie in [0, num_blocks) (checked, aborting).
  void CopyBlock(Backend& backend, int64_t src, int64_t dst) const;
  // Total bytes held (num_blocks * KvCacheBytesPerBlock).
  int64_t bytes() const;

 private:
  KvCacheShape shape_;
  std::vector<Buffer> k_;  // [num_layers] of [num_blocks, block_size, Hkv, hd]
  std::vector<Buffer> v_;  // [num_layers] of [num_blocks, block_size, Hkv, hd]
};

}  // namespace tpserve
