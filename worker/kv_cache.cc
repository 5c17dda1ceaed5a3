#include "worker/kv_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

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
  // Zeros come from the host in chunks of whole blocks (about 16 MB), so no
  // host copy of the whole cache is ever needed.
  const int64_t block_elems = shape.block_size * shape.num_kv_heads * shape.head_dim;
  const int64_t chunk_blocks =
      std::clamp<int64_t>((int64_t{4} << 20) / block_elems, 1, shape.num_blocks);
  const std::vector<float> zeros(static_cast<size_t>(chunk_blocks * block_elems), 0.0f);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    for (auto* list : {&cache.k_, &cache.v_}) {
      Buffer buffer = backend.Allocate(dtype, dims);
      for (int64_t b = 0; b < shape.num_blocks; b += chunk_blocks) {
        const int64_t n = std::min(chunk_blocks, shape.num_blocks - b);
        backend.CopyFromHost(zeros.data(), DType::kF32, buffer.tensor().Rows(b, n));
      }
      list->push_back(std::move(buffer));
    }
  }
  backend.Synchronize();
  return cache;
}

KvCacheLayer KvCache::layer(int64_t layer) const {
  if (layer < 0 || layer >= shape_.num_layers) {
    std::fprintf(stderr, "KvCache::layer(%lld): the cache has %lld layers\n",
                 static_cast<long long>(layer), static_cast<long long>(shape_.num_layers));
    std::abort();
  }
  return KvCacheLayer{k_[static_cast<size_t>(layer)].tensor(),
                      v_[static_cast<size_t>(layer)].tensor()};
}

int64_t KvCache::bytes() const {
  return shape_.num_blocks * KvCacheBytesPerBlock(shape_, k_.empty() ? DType::kF32
                                                                     : k_.front().tensor().dtype);
}

}  // namespace tpserve
