#include "worker/kv_cache.h"

#include <random>

#include "backend/cpu_backend.h"
#include "gtest/gtest.h"

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

TEST(KvCacheTest, LargeCachesAreZeroedInChunks) {
  auto backend = MakeCpuBackend();
  // 1 layer of 4099 blocks x 16 x 1 x 128: more than one zeroing chunk.
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, KvCacheShape{1, 4099, 16, 1, 128});
  ASSERT_TRUE(cache.ok()) << cache.status();
  const Tensor v = cache->layer(0).v;
  std::vector<float> host(static_cast<size_t>(v.numel()), 1.0f);
  backend->CopyToHostF32(v, host.data());
  for (float x : host) ASSERT_EQ(x, 0.0f);
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
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const KvCacheShape shape{1, 5, 3, 1, 4};
  absl::StatusOr<KvCache> cache = KvCache::Allocate(*backend, shape);
  ASSERT_TRUE(cache.ok());
  // One sequence of 4 tokens in blocks {4, 1}: slots 12, 13, 14, 3.
  const std::vector<int32_t> tokens{1, 2, 3, 4}, positions{0, 1, 2, 3}, qs{0, 4}, lens{4},
      table{4, 1}, last{3};
  const std::vector<int64_t> slots{12, 13, 14, 3};
  StepMetadata step;
  step.num_prefill_seqs = 1;
  step.token_ids = tokens;
  step.positions = positions;
  step.slot_mapping = slots;
  step.query_start = qs;
  step.seq_lens = lens;
  step.block_tables = table;
  step.max_blocks_per_seq = 2;
  step.logits_indices = last;
  ASSERT_TRUE(backend->BeginStep(step, cache->num_blocks(), cache->block_size(), 16).ok());
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
  const std::vector<int32_t> bad_table{5, 1};
  step.block_tables = bad_table;
  EXPECT_EQ(backend->BeginStep(step, cache->num_blocks(), cache->block_size(), 16).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
