// The SIMT runner (cuda/emu/simt.h) on small kernels written here in CUDA form:
// barriers, warp exchanges, shared memory and atomics behave as on a GPU, and
// the bugs it promises to catch (a barrier some thread skips, divergent
// barriers, a shuffle whose lanes differ from its mask, launches beyond
// sm_80/sm_90 limits, out-of-bounds accesses, unwritten shared reads) fail the
// launch with a report instead of hanging or passing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/sanitizers.h"
#include "cuda/mma.cuh"
#include "cuda/reduce.cuh"
#include "cuda/simt.cuh"
#include "cuda/vec.cuh"

namespace tpserve::cuda {
namespace {

using ::testing::HasSubstr;

// Launches `kernel` and returns cudaGetLastError() (the emulated runtime's).
#define LAUNCH(kernel, grid, block, shared, ...) \
  (TPSERVE_LAUNCH(kernel, grid, block, shared, nullptr)(__VA_ARGS__), cudaGetLastError())

__global__ void RotateThroughShared(int* out) {
  TPSERVE_SHARED_ARRAY(int, s, 256);
  const int t = static_cast<int>(threadIdx.x);
  s[t] = t + 1000 * static_cast<int>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = s[(t + 1) % blockDim.x];
}

TEST(SimtTest, BarrierMakesEveryThreadsSharedWriteVisible) {
  std::vector<int> out(3 * 256);
  ASSERT_EQ(LAUNCH(RotateThroughShared, 3, 256, 0, out.data()), cudaSuccess) << emu::LastReport();
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 256; ++t) EXPECT_EQ(out[b * 256 + t], (t + 1) % 256 + 1000 * b) << b << " " << t;
  }
}

// The same without the barrier: threads run until they block, so thread t
// reads s[t + 1] before thread t + 1 wrote it and sees the 0xff poison.
__global__ void RotateWithoutBarrier(float* out) {
  TPSERVE_SHARED_ARRAY(float, s, 64);
  const int t = static_cast<int>(threadIdx.x);
  s[t] = static_cast<float>(t);
  out[t] = s[(t + 1) % blockDim.x];
}

TEST(SimtTest, MissingBarrierReadsUnwrittenSharedMemoryAsNaN) {
  std::vector<float> out(64);
  ASSERT_EQ(LAUNCH(RotateWithoutBarrier, 1, 64, 0, out.data()), cudaSuccess);
  EXPECT_TRUE(std::isnan(out[0]));
}

// Each warp reads the other warp's slots, then overwrites its own without a
// barrier in between: on a GPU the other warp may not have read them yet.
__global__ void OverwriteBeforeOtherWarpRead(int* out) {
  TPSERVE_SHARED_ARRAY(int, s, 64);
  const int t = static_cast<int>(threadIdx.x);
  s[t] = 1;
  __syncthreads();
  out[t] = s[(t + 32) % 64];
  s[t] = 2;  // a __syncthreads() belongs before this write
}

TEST(SimtTest, AWarpRunningAheadExposesAMissingBarrierBeforeAnOverwrite) {
  std::vector<int> out(64);
  ASSERT_EQ(LAUNCH(OverwriteBeforeOtherWarpRead, 1, 64, 0, out.data()), cudaSuccess);
  int stale = 0;
  for (int v : out) stale += v != 1;
  EXPECT_GT(stale, 0) << "warp 0 ran to its overwrite before warp 1 read: warp 1 must see 2";
}

__global__ void BlockSums(const float* x, float* out) {
  const float s = BlockSum(x[blockIdx.x * blockDim.x + threadIdx.x]);
  const float again = BlockSum(2.f * x[blockIdx.x * blockDim.x + threadIdx.x]);  // reuses `partial`
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = s;
    out[2 * blockIdx.x + 1] = again;
  }
}

TEST(SimtTest, BlockSumOfReduceCuhOverSeveralBlockSizes) {
  for (int threads : {32, 96, 256, 1024}) {
    std::vector<float> x(2 * static_cast<size_t>(threads)), out(4);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.f;
    ASSERT_EQ(LAUNCH(BlockSums, 2, threads, 0, x.data(), out.data()), cudaSuccess) << emu::LastReport();
    for (int b = 0; b < 2; ++b) {
      float want = 0;
      for (int t = 0; t < threads; ++t) want += x[static_cast<size_t>(b * threads + t)];
      EXPECT_EQ(out[2 * b], want) << threads;
      EXPECT_EQ(out[2 * b + 1], 2 * want) << threads;
    }
  }
}

__global__ void Shuffles(int width, int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int v = 100 + static_cast<int>(threadIdx.x);
  int* o = out + threadIdx.x * 8;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 3, width);
  o[1] = __shfl_up_sync(0xffffffffu, v, 2, width);
  o[2] = __shfl_down_sync(0xffffffffu, v, 5, width);
  o[3] = __shfl_sync(0xffffffffu, v, 7, width);
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  o[5] = __any_sync(0xffffffffu, lane == 31);
  o[6] = __all_sync(0xffffffffu, lane < 31);
  __syncwarp();
  o[7] = static_cast<int>(__shfl_xor_sync(0xffffffffu, static_cast<double>(v) + 0.5, 1) * 2);  // 8 bytes
}

TEST(SimtTest, ShufflesAndVotesFollowTheirDocumentedLaneMaps) {
  for (int width : {32, 16, 8}) {
    std::vector<int> out(64 * 8);
    ASSERT_EQ(LAUNCH(Shuffles, 1, 64, 0, width, out.data()), cudaSuccess) << emu::LastReport();
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32, base = t - lane % width, in_seg = lane % width;
      const int* o = &out[static_cast<size_t>(t) * 8];
      EXPECT_EQ(o[0], 100 + (t ^ 3)) << t;
      EXPECT_EQ(o[1], 100 + (in_seg >= 2 ? t - 2 : t)) << t;
      EXPECT_EQ(o[2], 100 + (in_seg + 5 < width ? t + 5 : t)) << t;
      EXPECT_EQ(o[3], 100 + base + 7 % width) << t;
      EXPECT_EQ(static_cast<unsigned>(o[4]), 0x49249249u) << t;
      EXPECT_EQ(o[5], 1);
      EXPECT_EQ(o[6], 0);
      EXPECT_EQ(o[7], 2 * (100 + (t ^ 1)) + 1) << t;
    }
  }
}

// Lanes 0..15 exchange among themselves with a 16-lane mask: legal.
__global__ void HalfWarpShuffle(int* out) {
  const int lane = static_cast<int>(threadIdx.x);
  if (lane < 16) out[lane] = __shfl_xor_sync(0x0000ffffu, lane, 1);
}

TEST(SimtTest, ShuffleOverTheLanesItsMaskNamesSucceeds) {
  std::vector<int> out(16);
  ASSERT_EQ(LAUNCH(HalfWarpShuffle, 1, 32, 0, out.data()), cudaSuccess) << emu::LastReport();
  for (int l = 0; l < 16; ++l) EXPECT_EQ(out[static_cast<size_t>(l)], l ^ 1);
}

// A full mask, but only half the warp gets there: hangs or garbage on a GPU.
__global__ void DivergentFullMaskShuffle(int* out) {
  const int lane = static_cast<int>(threadIdx.x);
  if (lane < 16) out[lane] = __shfl_xor_sync(0xffffffffu, lane, 1);
}

TEST(SimtTest, ShuffleWhoseLanesDifferFromItsMaskFails) {
  std::vector<int> out(16);
  EXPECT_EQ(LAUNCH(DivergentFullMaskShuffle, 1, 32, 0, out.data()), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("__shfl_xor_sync"));
  EXPECT_THAT(emu::LastReport(), HasSubstr("lane 16 has exited"));
}

// A warp-collective operation (what cuda/mma.cuh's emulation runs on): each
// warp's function sees every lane's buffer in lane order, once.
void ReverseAndCount(const void* const* in, void* const* out) {
  static int calls = 0;
  ++calls;
  for (int l = 0; l < 32; ++l) *static_cast<int*>(out[l]) = *static_cast<const int*>(in[31 - l]) + 1000 * calls;
}

__global__ void CollectiveReverse(int* out) {
  const int mine = static_cast<int>(threadIdx.x);
  int got = -1;
  emu::WarpCollective(&mine, &got, &ReverseAndCount, std::source_location::current());
  out[threadIdx.x] = got;
}

TEST(SimtTest, WarpCollectiveRunsOnceOverEveryLanesBuffer) {
  std::vector<int> out(64);
  ASSERT_EQ(LAUNCH(CollectiveReverse, 1, 64, 0, out.data()), cudaSuccess) << emu::LastReport();
  // Warps run one at a time: one call per warp, each over its own 32 lanes.
  const int first = out[0] / 1000;
  for (int t = 0; t < 64; ++t) {
    const int warp = t / 32, lane = t % 32;
    EXPECT_EQ(out[static_cast<size_t>(t)] % 1000, warp * 32 + 31 - lane) << t;
    EXPECT_EQ(out[static_cast<size_t>(t)] / 1000, first + (warp == 0 ? 0 : 1)) << t;
  }
}

// An mma that one lane of the warp skips: undefined on a GPU.
__global__ void MmaWithALaneMissing(float* out) {
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  const float c[4] = {1, 1, 1, 1};
  float d[4] = {0, 0, 0, 0};
  if (threadIdx.x != 5) MmaBf16M16N8K16(d, a, b, c);
  out[threadIdx.x] = d[0];
}

TEST(SimtTest, MmaSkippedByALaneFails) {
  std::vector<float> out(32);
  EXPECT_EQ(LAUNCH(MmaWithALaneMissing, 1, 32, 0, out.data()), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("warp-collective"));
  EXPECT_THAT(emu::LastReport(), HasSubstr("lane 5 has exited"));
}

__global__ void ShuffleLeavingOutCaller(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x1u, 1, 1);
}

TEST(SimtTest, ShuffleWhoseMaskLeavesOutTheCallerFails) {
  std::vector<int> out(32);
  EXPECT_EQ(LAUNCH(ShuffleLeavingOutCaller, 1, 32, 0, out.data()), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("leaves the caller out"));
}

__global__ void EarlyExitBeforeBarrier(int* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(SimtTest, BarrierSkippedByAThreadFails) {
  std::vector<int> out(64);
  EXPECT_EQ(LAUNCH(EarlyExitBeforeBarrier, 1, 64, 0, out.data()), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("not reached by every thread"));
  EXPECT_THAT(emu::LastReport(), HasSubstr("thread (5,0,0) has exited"));
  EXPECT_THAT(emu::LastReport(), HasSubstr("EarlyExitBeforeBarrier"));
  // What CUDA_CHECK prints (cuda/check.h) carries the report.
  EXPECT_THAT(cudaGetErrorString(cudaErrorLaunchFailure), HasSubstr("thread (5,0,0) has exited"));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaGetLastError clears the error, as in CUDA";
}

__global__ void DivergentBarriers(int* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

TEST(SimtTest, ThreadsAtDifferentBarriersFail) {
  std::vector<int> out(64);
  EXPECT_EQ(LAUNCH(DivergentBarriers, 1, 64, 0, out.data()), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("different __syncthreads"));
}

// Programmatic dependent launch (cuda/simt.cuh): a kernel that waits at its
// top runs like any other and is counted; one some of whose threads exit
// without waiting fails (on a GPU they could read inputs the previous kernel
// had not yet written), while the same kernel launched plainly needs no wait.
__global__ void WaitsThenWrites(int* out) {
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<int>(threadIdx.x);
}
__global__ void WritesWithoutWaiting(int* out) {
  if (threadIdx.x % 2 == 0) TPSERVE_GRID_DEPENDENCY_WAIT();
  out[threadIdx.x] = 1;
}
#define LAUNCH_PDL(kernel, programmatic, grid, block, ...) \
  (TPSERVE_LAUNCH_PDL(grid, block, 0, nullptr, programmatic, kernel)(__VA_ARGS__), cudaGetLastError())

TEST(SimtTest, ProgrammaticLaunchFailsWhenAThreadExitsWithoutWaiting) {
  std::vector<int> out(64, -1);
  const int64_t before = emu::ProgrammaticLaunches();
  ASSERT_EQ(LAUNCH_PDL(WaitsThenWrites, true, 2, 32, out.data()), cudaSuccess) << emu::LastReport();
  EXPECT_EQ(out[31], 31);
  EXPECT_EQ(out[63], 31);
  EXPECT_EQ(emu::ProgrammaticLaunches(), before + 1);
  EXPECT_EQ(LAUNCH_PDL(WritesWithoutWaiting, true, 1, 64, out.data()), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("without TPSERVE_GRID_DEPENDENCY_WAIT()"));
  EXPECT_THAT(emu::LastReport(), HasSubstr("WritesWithoutWaiting"));
  EXPECT_EQ(LAUNCH_PDL(WritesWithoutWaiting, false, 1, 64, out.data()), cudaSuccess)
      << "a plain launch needs no wait: " << emu::LastReport();
  EXPECT_EQ(emu::ProgrammaticLaunches(), before + 2) << "only the programmatic launches count";
}

// Copies 16-byte vectors from `in` (elements offset .. ) to `out`.
__global__ void CopyVectors(const __nv_bfloat16* in, int64_t offset, __nv_bfloat16* out) {
  StoreBf16x8(out, threadIdx.x, LoadBf16x8(in + offset, threadIdx.x));
}

TEST(SimtTest, VectorAccessAtAnAddressTheGpuWouldFaultOnFails) {
  std::vector<uint4> in(5), out(4);  // uint4: 16-byte aligned storage
  auto* in_bf16 = reinterpret_cast<const __nv_bfloat16*>(in.data());
  auto* out_bf16 = reinterpret_cast<__nv_bfloat16*>(out.data());
  ASSERT_EQ(LAUNCH(CopyVectors, 1, 4, 0, in_bf16, int64_t{8}, out_bf16), cudaSuccess) << emu::LastReport();
  EXPECT_EQ(LAUNCH(CopyVectors, 1, 4, 0, in_bf16, int64_t{4}, out_bf16), cudaErrorLaunchFailure)
      << "an offset of 4 bf16 (8 bytes) is not a whole vector";
  EXPECT_THAT(emu::LastReport(), HasSubstr("a 16-byte load"));
  EXPECT_THAT(emu::LastReport(), HasSubstr("not a multiple of 16 bytes"));
  EXPECT_THAT(emu::LastReport(), HasSubstr("CopyVectors"));
  EXPECT_EQ(LAUNCH(CopyVectors, 1, 4, 0, in_bf16, int64_t{8}, out_bf16 + 1), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("a 16-byte store"));
}

__global__ void Nothing(int*) {}

__global__ void BigStaticShared(int* out) {
  TPSERVE_SHARED_ARRAY(float, big, 13 * 1024);  // 52 KiB
  big[threadIdx.x] = 1.f;
  out[0] = 1;
}

TEST(SimtTest, LaunchesBeyondSm80AndSm90LimitsFail) {
  int out = 0;
  EXPECT_EQ(LAUNCH(Nothing, 1, 1025, 0, &out), cudaErrorInvalidConfiguration);
  EXPECT_THAT(emu::LastReport(), HasSubstr("1025 threads"));
  EXPECT_EQ(LAUNCH(Nothing, 1, dim3(1, 1, 65), 0, &out), cudaErrorInvalidConfiguration);
  EXPECT_EQ(LAUNCH(Nothing, dim3(1, 65536), 32, 0, &out), cudaErrorInvalidConfiguration);
  EXPECT_EQ(LAUNCH(Nothing, 0, 32, 0, &out), cudaErrorInvalidConfiguration);
  EXPECT_EQ(LAUNCH(Nothing, 1, 32, 49 * 1024, &out), cudaErrorInvalidConfiguration);
  EXPECT_THAT(emu::LastReport(), HasSubstr("dynamic shared memory"));
  EXPECT_EQ(LAUNCH(BigStaticShared, 1, 32, 0, &out), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("'big'"));
  EXPECT_EQ(LAUNCH(Nothing, 1, 1024, 48 * 1024, &out), cudaSuccess) << emu::LastReport();
}

__global__ void CountIntoDynamicShared(int n, int* total) {
  TPSERVE_DYNAMIC_SHARED(int, bins);  // [n]
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) bins[i] = 0;
  __syncthreads();
  atomicAdd(&bins[threadIdx.x % n], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) atomicAdd(total, bins[i]);
  }
}

TEST(SimtTest, DynamicSharedMemoryIsSizedByTheLaunchAndAtomicsCount) {
  int total = 0;
  ASSERT_EQ(LAUNCH(CountIntoDynamicShared, 5, 96, 7 * sizeof(int), 7, &total), cudaSuccess) << emu::LastReport();
  EXPECT_EQ(total, 5 * 96);
}

// The "last block" pattern (cuda/sampling_sliced.cu): every block writes a
// partial and takes a ticket; the block with the last ticket sums the
// partials (through __ldcg) and notes which block it was. `order` gets each
// block's ticket.
__global__ void LastBlockSums(int* partial, unsigned* arrivals, int* order, int* sum, int* last) {
  TPSERVE_SHARED(unsigned, ticket);
  const int b = static_cast<int>(blockIdx.x + gridDim.x * blockIdx.y);
  const int blocks = static_cast<int>(gridDim.x * gridDim.y);
  if (threadIdx.x == 0) partial[b] = b + 1;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) ticket = atomicAdd(arrivals, 1u);
  __syncthreads();
  if (threadIdx.x == 0) order[b] = static_cast<int>(ticket);
  if (ticket != static_cast<unsigned>(blocks - 1) || threadIdx.x != 0) return;
  __threadfence();
  int total = 0;
  for (int i = 0; i < blocks; ++i) total += __ldcg(&partial[i]);
  *sum = total;
  *last = b;
  *arrivals = 0;
}

// Blocks run in grid order, or last first under TPSERVE_EMU_REVERSE_BLOCKS
// (read at each launch); the last block to arrive sees every partial either way.
TEST(SimtTest, BlocksRunInGridOrderOrReversedAndTheLastToArriveSeesEveryPartial) {
  const dim3 grid(3, 2);
  const int blocks = 6;
  for (const char* reverse : {"0", "1"}) {
    SCOPED_TRACE(std::string("TPSERVE_EMU_REVERSE_BLOCKS=") + reverse);
    ASSERT_EQ(setenv("TPSERVE_EMU_REVERSE_BLOCKS", reverse, 1), 0);
    std::vector<int> partial(blocks, -1), order(blocks, -1);
    unsigned arrivals = 0;
    int sum = 0, last = -1;
    const cudaError_t err = LAUNCH(LastBlockSums, grid, 64, 0, partial.data(), &arrivals, order.data(), &sum, &last);
    ASSERT_EQ(unsetenv("TPSERVE_EMU_REVERSE_BLOCKS"), 0);
    ASSERT_EQ(err, cudaSuccess) << emu::LastReport();
    const bool reversed = reverse[0] == '1';
    for (int b = 0; b < blocks; ++b) EXPECT_EQ(order[b], reversed ? blocks - 1 - b : b) << "block " << b;
    EXPECT_EQ(sum, blocks * (blocks + 1) / 2);
    EXPECT_EQ(last, reversed ? 0 : blocks - 1);
    EXPECT_EQ(arrivals, 0u);
  }
}

__global__ void WriteOnePastTheEnd(int n, int* out) {
  out[threadIdx.x] = n;  // one thread too many
}

__global__ void SharedOnePastTheEnd(int* out) {
  TPSERVE_SHARED_ARRAY(int, s, 31);
  s[threadIdx.x] = 1;  // 32 threads
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(SimtDeathTest, OutOfBoundsGlobalAndSharedAccessesAreReported) {
#if !TPSERVE_ASAN
  GTEST_SKIP() << "built without AddressSanitizer (no runtime found at configure): bounds are not checked";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        int* out = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&out), 31 * sizeof(int));
        LAUNCH(WriteOnePastTheEnd, 1, 32, 0, 31, out);
      },
      "heap-buffer-overflow");
  EXPECT_DEATH(
      {
        std::vector<int> out(32);
        LAUNCH(SharedOnePastTheEnd, 1, 32, 0, out.data());
      },
      "heap-buffer-overflow");
}

}  // namespace
}  // namespace tpserve::cuda
