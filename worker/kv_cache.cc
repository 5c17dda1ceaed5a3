#include "worker/kv_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tpserve {

int64_t KvCacheBytesPerBlock(const KvCacheShape& shape, DType dtype) {
  return 2 * shape.num_layers * shape.block_size * shape.num_kv_heads * shape.head_dim *
         static_cast<int64_t>(DTypeSize(dtype));
}

absl::StatusOr<KvCache> KvCache::Allocate(Backend& backend, const KvCacheShape& shape) {
  const std::pair<const char*, int64_t> fields[] = {
      {"num_layers", shape.num_layers},     {"num_blocks", shape.num_blocks},
      {"block_size", shape.block_size},     {"num_kv_heads", shape.num_kv_heads},
      {"head_dim", shape.head_dim},
  };
  for (const auto& [name, value] : fields) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV cache: ", name, " is ", value, "; it must be positive"));
    }
  }
  KvCache cache;
  cache.shape_ = shape;
  const int64_t dims[] = {shape.num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim};
  const DType dtype = backend.compute_dtype();
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    for (auto* list : {&cache.k_, &cache.v_}) {
      // Zero-filled by the backend (backend.h): no host copy of zeros.
      absl::StatusOr<Buffer> buffer = backend.TryAllocate(dtype, dims);
      if (!buffer.ok()) {
        return absl::Status(buffer.status().code(),
                            absl::StrCat("KV cache: layer ", l, " of ", shape.num_layers, " (",
                                         shape.num_blocks, " blocks): ", buffer.status().message()));
      }
      list->push_back(*std::move(buffer));
    }
  }
  backend.Synchronize();
  return cache;
}

KvCacheLayer KvCache::layer(int64_t layer) const {
  TPSERVE_CHECK(layer >= 0 && layer < shape_.num_layers, "KvCache::layer(", layer, "): the cache has ",
                shape_.num_layers, " layers");
  return KvCacheLayer{k_[static_cast<size_t>(layer)].tensor(),
                      v_[static_cast<size_t>(layer)].tensor()};
}

void KvCache::CopyBlock(Backend& backend, int64_t src, int64_t dst) const {
  TPSERVE_CHECK(src >= 0 && src < shape_.num_blocks && dst >= 0 && dst < shape_.num_blocks,
                "KvCache::CopyBlock(", src, ", ", dst, "): block ids must lie in [0, ", shape_.num_blocks, ")");
  for (size_t l = 0; l < k_.size(); ++l) {
    backend.Copy(k_[l].tensor().Rows(src, 1), k_[l].tensor().Rows(dst, 1));
    backend.Copy(v_[l].tensor().Rows(src, 1), v_[l].tensor().Rows(dst, 1));
  }
}

int64_t KvCache::bytes() const {
  return shape_.num_blocks * KvCacheBytesPerBlock(shape_, k_.empty() ? DType::kF32
                                                                     : k_.front().tensor().dtype);
}

}  // namespace tpserve
