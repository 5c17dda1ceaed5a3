#include "worker/kv_cache.h"

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/step_batch.h"
#include "gtest/gtest.h"
#include "tests/testing/seed.h"

namespace tpserve {
namespace {

TEST(KvCacheTest, AllocatesZeroedKAndVOfEveryLayerInTheDesignLayout) {
  auto backend = MakeCpuBackend();
  const KvCacheShape shape{3, 7, 5, 2, 6};  // layers, blocks, block_size, Hkv, hd
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, shape);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->num_blocks(), 7);
  EXPECT_EQ(cache->block_size(), 5);
  for (int64_t l = 0; l < 3; ++l) {
    const KvCacheLayer layer = cache->layer(l);
    for (const Tensor* t : {&layer.k, &layer.v}) {
      ASSERT_EQ(t->ndim, 4);
      EXPECT_EQ(t->ShapeString(), "[7, 5, 2, 6]");
      EXPECT_EQ(t->dtype, DType::kF32);
      std::vector<float> host(static_cast<size_t>(t->numel()), 1.0f);
      backend->CopyToHostF32(*t, host.data());
      for (float v : host) ASSERT_EQ(v, 0.0f);
    }
    EXPECT_NE(layer.k.data, layer.v.data);
    if (l > 0) {
      EXPECT_NE(layer.k.data, cache->layer(l - 1).k.data);
    }
  }
  // 2 (K and V) * 3 layers * 5 tokens * 2 heads * 6 dims * 4 bytes
  EXPECT_EQ(KvCacheBytesPerBlock(shape, DType::kF32), 2 * 3 * 5 * 2 * 6 * 4);
  EXPECT_EQ(KvCacheBytesPerBlock(shape, DType::kBF16), 2 * 3 * 5 * 2 * 6 * 2);
  EXPECT_EQ(cache->bytes(), 7 * KvCacheBytesPerBlock(shape, DType::kF32));
}

// The cache is zero even in memory this process wrote and freed: it relies on
// Backend::Allocate's zero-fill, and nothing else zeroes it. Buffers of the
// cache's layer size are filled with ones and freed behind a live allocation
// (so glibc keeps them in the heap instead of returning them to the system),
// and the cache's buffers are then carved from that dirty memory: an Allocate
// that did not zero-fill (malloc for calloc) fails here.
TEST(KvCacheTest, ACacheInReusedDirtyMemoryIsZero) {
  auto backend = MakeCpuBackend();
  // 256 KiB per layer's K or V: above malloc's first mmap threshold, so the
  // first frees raise it and later buffers come from the heap.
  const KvCacheShape shape{3, 64, 16, 2, 8};
  const int64_t dims[] = {shape.num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim};
  const std::vector<float> ones(static_cast<size_t>(64 * 16 * 2 * 8), 1.0f);
  std::vector<float> host(ones.size(), 1.0f);
  std::vector<std::unique_ptr<int>> fences;
  for (int round = 0; round < 3; ++round) {
    std::vector<Buffer> dirty;
    for (int i = 0; i < 2 * shape.num_layers + 2; ++i) {
      dirty.push_back(backend->Allocate(backend->compute_dtype(), dims));
      backend->CopyFromHost(ones.data(), DType::kF32, dirty.back().tensor());
      backend->CopyToHostF32(dirty.back().tensor(), host.data());
      ASSERT_EQ(host.front(), 1.0f);
    }
    fences.push_back(std::make_unique<int>(round));  // allocated after them: they stay in the heap
  }
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, shape);
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    for (const Tensor& t : {cache->layer(l).k, cache->layer(l).v}) {
      ASSERT_EQ(t.numel(), static_cast<int64_t>(host.size()));
      std::fill(host.begin(), host.end(), 1.0f);
      backend->CopyToHostF32(t, host.data());
      for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(host[i], 0.0f) << "layer " << l << " element " << i;
    }
  }
}

TEST(KvCacheTest, NonPositiveDimensionsAreErrorsNamingTheField) {
  auto backend = MakeCpuBackend();
  struct Case {
    KvCacheShape shape;
    const char* field;
  } cases[] = {
      {{0, 4, 16, 2, 8}, "num_layers"},   {{2, 0, 16, 2, 8}, "num_blocks"},
      {{2, 4, 0, 2, 8}, "block_size"},    {{2, 4, 16, -1, 8}, "num_kv_heads"},
      {{2, 4, 16, 2, 0}, "head_dim"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, c.shape);
    ASSERT_FALSE(cache.ok()) << c.field;
    EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(cache.status().message().find(c.field), std::string::npos) << cache.status();
  }
}

TEST(KvCacheTest, StoreThroughTheBackendLandsInTheSlotsOfTheBlockTable) {
  auto backend = MakeCpuBackend();
  const uint32_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const KvCacheShape shape{1, 5, 3, 1, 4};
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, shape);
  ASSERT_TRUE(cache.ok());
  // One sequence of 4 tokens in blocks {4, 1}: slots 12, 13, 14, 3.
  const std::vector<int32_t> tokens{1, 2, 3, 4}, table{4, 1};
  absl::StatusOr<StepBatch> batch =
      StepBatch::Build(std::vector<StepSequence>{{tokens, 0, table}}, cache->block_size());
  ASSERT_TRUE(batch.ok()) << batch.status();
  const std::vector<int64_t> slots{12, 13, 14, 3};
  ASSERT_EQ(batch->arrays().slot_mapping, slots);
  ASSERT_TRUE(backend->BeginStep(batch->view(), cache->num_blocks(), cache->block_size(), 16).ok());
  const AttentionShape attn{1, 1, 4};
  std::vector<float> qkv(4 * 12);
  std::normal_distribution<float> normal;
  for (float& x : qkv) x = normal(rng);
  Buffer qkv_dev = backend->Allocate(DType::kF32, {4, 12});
  backend->CopyFromHost(qkv.data(), DType::kF32, qkv_dev.tensor());
  backend->StoreKv(qkv_dev, attn, cache->layer(0));
  std::vector<float> k(5 * 3 * 4), v(5 * 3 * 4);
  backend->CopyToHostF32(cache->layer(0).k, k.data());
  backend->CopyToHostF32(cache->layer(0).v, v.data());
  for (int t = 0; t < 4; ++t) {
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(k[slots[t] * 4 + d], qkv[t * 12 + 4 + d]);
      EXPECT_EQ(v[slots[t] * 4 + d], qkv[t * 12 + 8 + d]);
    }
  }
  // An out-of-range block id is refused before anything is written.
  batch->mutable_arrays().block_tables = {5, 1};
  EXPECT_EQ(backend->BeginStep(batch->view(), cache->num_blocks(), cache->block_size(), 16).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
