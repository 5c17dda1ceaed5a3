// Backend::Allocate's contract on the CPU backend: buffers come zero-filled;
// an allocation the machine cannot hold is RESOURCE_EXHAUSTED naming the
// bytes asked and free (TryAllocate), or ends the process saying so
// (Allocate); and the KV cache passes that status on, naming the layer.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "worker/kv_cache.h"

namespace tpserve {
namespace {

// 2^50 floats: 4 PiB, beyond any machine and beyond x86-64's 128 TiB of user
// address space, so calloc fails whatever the overcommit setting.
constexpr int64_t kTooManyFloats = int64_t{1} << 50;
// What CpuBackend asks calloc for: the buffer plus its 64-byte alignment slack.
const std::string kAskedBytes = std::to_string((kTooManyFloats * 4) + 64);

TEST(CpuAllocationTest, BuffersAreZeroFilled) {
  CpuBackend backend;
  Buffer buffer = backend.Allocate(DType::kF32, {3, 257});
  std::vector<float> host(3 * 257, 1.0f);
  backend.CopyToHostF32(buffer, host.data());
  for (float v : host) ASSERT_EQ(v, 0.0f);
}

TEST(CpuAllocationTest, TooLargeIsResourceExhaustedNamingTheBytes) {
  CpuBackend backend;
  absl::StatusOr<Buffer> buffer = backend.TryAllocate(DType::kF32, {kTooManyFloats});
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kResourceExhausted) << buffer.status();
  const std::string message(buffer.status().message());
  EXPECT_NE(message.find(kAskedBytes + " bytes asked"), std::string::npos) << message;
  EXPECT_NE(message.find("bytes of physical memory free"), std::string::npos) << message;

  // The backend is usable afterwards.
  absl::StatusOr<Buffer> small = backend.TryAllocate(DType::kF32, {4});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->tensor().numel(), 4);
}

TEST(CpuAllocationDeathTest, AllocateEndsTheProcessNamingTheBytes) {
  CpuBackend backend;
  EXPECT_DEATH(backend.Allocate(DType::kF32, {kTooManyFloats}), kAskedBytes + " bytes asked");
}

TEST(CpuAllocationTest, KvCacheTooLargeIsResourceExhaustedNamingTheLayer) {
  CpuBackend backend;
  KvCacheShape shape;
  shape.num_layers = 2;
  shape.num_blocks = int64_t{1} << 36;  // x 16 tokens x 8 heads x 128 dims x 4 bytes = 4 PiB a layer
  shape.block_size = 16;
  shape.num_kv_heads = 8;
  shape.head_dim = 128;
  absl::StatusOr<KvCache> cache = KvCache::Allocate(backend, shape);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kResourceExhausted) << cache.status();
  const std::string message(cache.status().message());
  EXPECT_NE(message.find("KV cache: layer 0 of 2"), std::string::npos) << message;
  EXPECT_NE(message.find(kAskedBytes + " bytes asked"), std::string::npos) << message;
}

}  // namespace
}  // namespace tpserve
