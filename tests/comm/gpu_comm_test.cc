// Communicators on CUDA tensors, with real processes: gloo with host staging
// (several ranks sharing GPU 0) and NCCL (one GPU per rank). Each test skips
// itself with a message when the machine has too few GPUs (none at all is a
// failure under TPSERVE_REQUIRE_GPU=1).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "rank_launcher.h"
#include "tests/testing/seed.h"

namespace tpserve::comm_test {
namespace {

int GpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// Under scripts/gpu-check.sh (TPSERVE_REQUIRE_GPU=1) a missing device is a
// failure, not a skip (tests/cuda/gpu_test_util.h says why); too few GPUs for
// a multi-GPU case stays a skip.
bool GpuRequired() {
  const char* v = std::getenv("TPSERVE_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void RunWorld(const std::string& backend, int world) {
  const uint64_t seed = testing_util::TestSeed();
  SCOPED_TRACE(testing::Message() << backend << " world " << world << ", seed " << seed);
  std::string store = FreshTempDir(backend + "-cuda");
  ASSERT_FALSE(store.empty());
  std::vector<int> ranks(world);
  for (int r = 0; r < world; ++r) ranks[r] = r;
  for (const RankResult& r :
       RunRanks(store, world, ranks,
                {"--scenario", "collectives", "--device", "cuda", "--backend", backend, "--seed",
                 std::to_string(seed), "--timeout_ms", "60000"},
                std::chrono::seconds(120))) {
    EXPECT_FALSE(r.timed_out) << "rank " << r.rank << " hung and was killed";
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " failed (its stderr is above)";
  }
}

TEST(GlooHostStaging, TwoRanksShareOneGpu) {
  if (GpuCount() < 1) {
    if (GpuRequired()) FAIL() << "no usable CUDA device, and TPSERVE_REQUIRE_GPU=1 says this run must have one";
    GTEST_SKIP() << "no CUDA device present: GPU test skipped";
  }
  RunWorld("gloo", 2);
}

TEST(Nccl, TwoRanks) {
#if !defined(TPSERVE_WITH_NCCL)
  GTEST_SKIP() << "built without NCCL";
#endif
  if (GpuCount() < 2) GTEST_SKIP() << "NCCL test needs 2 GPUs, found " << GpuCount();
  RunWorld("nccl", 2);
}

TEST(Nccl, FourRanks) {
#if !defined(TPSERVE_WITH_NCCL)
  GTEST_SKIP() << "built without NCCL";
#endif
  if (GpuCount() < 4) GTEST_SKIP() << "NCCL test needs 4 GPUs, found " << GpuCount();
  RunWorld("nccl", 4);
}

}  // namespace
}  // namespace tpserve::comm_test
