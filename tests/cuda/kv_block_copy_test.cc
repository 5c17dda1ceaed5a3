// Copy-on-write of KV blocks (parallel sampling, worker/kv_cache.h
// KvCache::CopyBlock) on the CUDA backend: a device-to-device copy on the
// backend's stream copies every layer's K and V of one block to another, bit
// for bit, and touches nothing else; the same as on the CPU backend.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/testing/seed.h"
#include "worker/kv_cache.h"

namespace tpserve {
namespace {

// Random values (exact in bf16) in every layer's K and V, a block copied to
// two others in turn, then everything read back.
void CheckCopies(Backend& backend) {
  const KvCacheShape shape{.num_layers = 3, .num_blocks = 7, .block_size = 5, .num_kv_heads = 3, .head_dim = 8};
  absl::StatusOr<KvCache> cache = KvCache::Allocate(backend, shape);
  ASSERT_TRUE(cache.ok()) << cache.status();
  std::mt19937 rng(static_cast<uint32_t>(testing_util::TestSeed()));
  const int64_t per_block = shape.block_size * shape.num_kv_heads * shape.head_dim;
  const int64_t numel = shape.num_blocks * per_block;
  std::vector<std::vector<float>> before;  // [2 * layer + (k: 0, v: 1)][numel]
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    for (const Tensor& t : {cache->layer(l).k, cache->layer(l).v}) {
      std::vector<float> values(static_cast<size_t>(numel));
      for (float& x : values) x = static_cast<float>(static_cast<int>(rng() % 512) - 256) / 64.0f;
      backend.CopyFromHost(values.data(), DType::kF32, t);
      before.push_back(values);
    }
  }
  cache->CopyBlock(backend, 2, 5);
  cache->CopyBlock(backend, 2, 0);
  cache->CopyBlock(backend, 6, 2);  // the source of the copies above, overwritten after them
  backend.Synchronize();
  size_t i = 0;
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    for (const Tensor& t : {cache->layer(l).k, cache->layer(l).v}) {
      std::vector<float> after(static_cast<size_t>(numel));
      backend.CopyToHostF32(t, after.data());
      std::vector<float> want = before[i++];
      auto block = [&](std::vector<float>& v, int64_t b) { return v.begin() + b * per_block; };
      std::copy(block(want, 2), block(want, 3), block(want, 5));
      std::copy(block(want, 2), block(want, 3), block(want, 0));
      std::copy(block(want, 6), block(want, 7), block(want, 2));
      EXPECT_EQ(after, want) << "layer " << l;
    }
  }
}

TEST(KvBlockCopyTest, CudaBackendCopiesBlocksOnTheDevice) {
  TPSERVE_REQUIRE_GPU();
  CheckCopies(*MakeCudaBackend(0));
}

TEST(KvBlockCopyTest, CpuBackendCopiesBlocks) { CheckCopies(*MakeCpuBackend()); }

}  // namespace
}  // namespace tpserve
