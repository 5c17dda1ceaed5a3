// CUDA graph capture and replay in the emulated runtime (cuda/emu/capture.cc):
// what a capture records and how a replay runs it (kernel arguments as they
// were at the launch, host memory as it is at the replay, the capture's
// order, programmatic launches counted and checked per replay, cuBLAS GEMMs),
// that a capture records only its own stream, and that each rule of stream
// capture the emulator holds fails with CUDA's error code and invalidates the
// capture, as a GPU does.
#include <cublas_v2.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

using ::testing::HasSubstr;

// out[i] = in[i] * scale for i < n.
__global__ void Scale(const int* in, int scale, int n, int* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i] * scale;
}

// x[0] = x[0] * 10 + digit: the order of launches shows in the digits.
__global__ void AppendDigit(int* x, int digit) { x[0] = x[0] * 10 + digit; }

__global__ void WaitsThenWrites(int* out) {
  TPSERVE_GRID_DEPENDENCY_WAIT();
  TPSERVE_GRID_DEPENDENTS_LAUNCH();
  out[threadIdx.x] = static_cast<int>(threadIdx.x) + 1;
}
__global__ void WritesWithoutWaiting(int* out) { out[threadIdx.x] = 1; }

// Device memory that frees itself.
template <typename T>
struct Device {
  T* ptr = nullptr;
  explicit Device(size_t n) { EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)), cudaSuccess); }
  ~Device() { cudaFree(ptr); }
};

// A stream (and its graph, once captured) that cleans up after itself.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
};

// Ends the capture of `s` and instantiates it (nullptr when either fails).
cudaGraphExec_t EndAndInstantiate(cudaStream_t s) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(s, &graph) != cudaSuccess) return nullptr;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  return err == cudaSuccess ? exec : nullptr;
}

// The device ints, copied on `stream` (the legacy stream by default, which
// no test may touch while a capture is open).
std::vector<int> Read(const int* device, size_t n, cudaStream_t stream = nullptr) {
  std::vector<int> host(n);
  EXPECT_EQ(cudaMemcpyAsync(host.data(), device, n * sizeof(int), cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return host;
}

TEST(EmuGraphTest, ReplayUsesCapturedArgumentsAndReadsPinnedMemoryAtReplay) {
  constexpr int n = 37;
  Device<int> in(n), out(n);
  ASSERT_EQ(cudaMemset(out.ptr, 0, n * sizeof(int)), cudaSuccess);
  int* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(int)), cudaSuccess);
  for (int i = 0; i < n; ++i) pinned[i] = i;
  int scale = 3;
  Stream st;
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(in.ptr, pinned, n * sizeof(int), cudaMemcpyHostToDevice, st.s), cudaSuccess);
  TPSERVE_LAUNCH(Scale, 2, 32, 0, st.s)(in.ptr, scale, n, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaStreamCaptureStatus status;
  ASSERT_EQ(cudaStreamIsCapturing(st.s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  cudaGraphExec_t exec = EndAndInstantiate(st.s);
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(Read(out.ptr, n), std::vector<int>(n, 0)) << "a capture records; nothing runs";

  scale = 100;  // the launch copied 3
  for (int round = 1; round <= 2; ++round) {
    for (int i = 0; i < n; ++i) pinned[i] = round * 1000 + i;  // the copy reads these at the replay
    ASSERT_EQ(cudaGraphLaunch(exec, st.s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st.s), cudaSuccess);
    const std::vector<int> got = Read(out.ptr, n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], (round * 1000 + i) * 3) << "round " << round;
  }
  cudaGraphExecDestroy(exec);
  cudaFreeHost(pinned);
}

TEST(EmuGraphTest, ReplayRunsTheOperationsInCaptureOrder) {
  Device<int> x(1), y(1);
  Stream st;
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(x.ptr, 0, sizeof(int), st.s), cudaSuccess);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, st.s)(x.ptr, 1);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, st.s)(x.ptr, 2);
  ASSERT_EQ(cudaMemcpyAsync(y.ptr, x.ptr, sizeof(int), cudaMemcpyDeviceToDevice, st.s), cudaSuccess);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, st.s)(x.ptr, 3);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, st.s)(x.ptr, 4);
  cudaGraphExec_t exec = EndAndInstantiate(st.s);
  ASSERT_NE(exec, nullptr);
  for (int replay = 0; replay < 2; ++replay) {  // the captured memset restarts each replay
    ASSERT_EQ(cudaGraphLaunch(exec, st.s), cudaSuccess);
    EXPECT_EQ(Read(x.ptr, 1)[0], 1234);
    EXPECT_EQ(Read(y.ptr, 1)[0], 12);
  }
  // A graph launched inside another capture replays as one step of it.
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, st.s), cudaSuccess);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, st.s)(x.ptr, 5);
  cudaGraphExec_t outer = EndAndInstantiate(st.s);
  ASSERT_NE(outer, nullptr);
  ASSERT_EQ(cudaGraphLaunch(outer, st.s), cudaSuccess);
  EXPECT_EQ(Read(x.ptr, 1)[0], 12345);
  cudaGraphExecDestroy(outer);
  cudaGraphExecDestroy(exec);
}

TEST(EmuGraphTest, ACaptureRecordsOnlyItsOwnStream) {
  Device<int> a(1), b(1);
  ASSERT_EQ(cudaMemset(a.ptr, 0, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(b.ptr, 0, sizeof(int)), cudaSuccess);
  Stream capturing, other;
  ASSERT_EQ(cudaStreamBeginCapture(capturing.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, capturing.s)(a.ptr, 7);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, other.s)(b.ptr, 9);  // runs now
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other.s), cudaSuccess) << "another stream may be waited for";
  cudaStreamCaptureStatus status;
  ASSERT_EQ(cudaStreamIsCapturing(other.s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(Read(b.ptr, 1, other.s)[0], 9);
  cudaGraphExec_t exec = EndAndInstantiate(capturing.s);
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(Read(a.ptr, 1)[0], 0);
  ASSERT_EQ(cudaGraphLaunch(exec, other.s), cudaSuccess);  // a graph may replay on any stream
  EXPECT_EQ(Read(a.ptr, 1)[0], 7);
  EXPECT_EQ(Read(b.ptr, 1)[0], 9) << "the other stream's launch is not in the graph";
  cudaGraphExecDestroy(exec);
}

TEST(EmuGraphTest, ProgrammaticLaunchesAreCountedAndCheckedAtEachReplay) {
  Device<int> out(32);
  Stream st;
  const int64_t before = emu::ProgrammaticLaunches();
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  TPSERVE_LAUNCH_PDL(1, 32, 0, st.s, true, WaitsThenWrites)(out.ptr);
  cudaGraphExec_t exec = EndAndInstantiate(st.s);
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(emu::ProgrammaticLaunches(), before) << "a capture runs nothing";
  for (int replay = 1; replay <= 3; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(exec, st.s), cudaSuccess) << emu::LastReport();
    EXPECT_EQ(emu::ProgrammaticLaunches(), before + replay);
  }
  EXPECT_EQ(Read(out.ptr, 32)[31], 32);
  cudaGraphExecDestroy(exec);

  // A programmatic kernel that never waits is captured, and fails its replay.
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  TPSERVE_LAUNCH_PDL(1, 32, 0, st.s, true, WritesWithoutWaiting)(out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  exec = EndAndInstantiate(st.s);
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(cudaGraphLaunch(exec, st.s), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::LastReport(), HasSubstr("without TPSERVE_GRID_DEPENDENCY_WAIT()"));
  cudaGraphExecDestroy(exec);
}

TEST(EmuGraphTest, CublasGemmOnACapturingHandleIsRecordedWithItsScalars) {
  // C[2, 3] = alpha · A[2, 4] · B[4, 3] in f32, column-major.
  constexpr int m = 2, n = 3, k = 4;
  Device<float> a(m * k), b(k * n), c(m * n);
  std::vector<float> ha(m * k), hb(k * n);
  for (int i = 0; i < m * k; ++i) ha[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  for (int i = 0; i < k * n; ++i) hb[static_cast<size_t>(i)] = static_cast<float>(i % 5) - 2.f;
  ASSERT_EQ(cudaMemcpy(a.ptr, ha.data(), ha.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.ptr, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  Stream st;
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(handle, st.s), CUBLAS_STATUS_SUCCESS);
  float alpha = 2.f, beta = 0.f;
  auto gemm = [&] {
    return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.ptr, CUDA_R_32F, m, b.ptr, CUDA_R_32F,
                        k, &beta, c.ptr, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  ASSERT_EQ(cudaMemset(c.ptr, 0, m * n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(gemm(), CUBLAS_STATUS_SUCCESS);
  cudaGraphExec_t exec = EndAndInstantiate(st.s);
  ASSERT_NE(exec, nullptr);
  std::vector<float> got(m * n);
  ASSERT_EQ(cudaMemcpy(got.data(), c.ptr, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(m * n, 0.f)) << "the GEMM was recorded, not run";

  alpha = 5.f;  // read at the call: the graph keeps 2
  for (float& v : ha) v = -v;  // A is read at the replay
  ASSERT_EQ(cudaMemcpy(a.ptr, ha.data(), ha.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, st.s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), c.ptr, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float want = 0.f;
      for (int p = 0; p < k; ++p) want += ha[static_cast<size_t>(p * m + i)] * hb[static_cast<size_t>(j * k + p)];
      EXPECT_EQ(got[static_cast<size_t>(j * m + i)], 2.f * want) << i << "," << j;
    }
  }
  cudaGraphExecDestroy(exec);

  // A handle left on the legacy stream while a stream captures breaks the capture.
  ASSERT_EQ(cublasSetStream(handle, nullptr), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(gemm(), CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(st.s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  cublasDestroy(handle);
}

// One call that breaks a rule of stream capture, made while `capturing`
// captures (thread-local mode) after one kernel was recorded; `scratch` is
// one int of device memory allocated before the capture.
struct Violation {
  const char* name;
  cudaError_t expected;
  std::function<cudaError_t(cudaStream_t capturing, int* scratch)> call;
};

void PrintTo(const Violation& v, std::ostream* os) { *os << v.name; }

const Violation kViolations[] = {
    {"StreamSynchronize", cudaErrorStreamCaptureUnsupported,
     [](cudaStream_t s, int*) { return cudaStreamSynchronize(s); }},
    {"DeviceSynchronize", cudaErrorStreamCaptureUnsupported, [](cudaStream_t, int*) { return cudaDeviceSynchronize(); }},
    {"Malloc", cudaErrorStreamCaptureUnsupported,
     [](cudaStream_t, int*) {
       void* p = nullptr;
       return cudaMalloc(&p, 64);
     }},
    {"SynchronousMemcpy", cudaErrorStreamCaptureImplicit,
     [](cudaStream_t, int*) {
       static int src = 1, dst = 0;
       return cudaMemcpy(&dst, &src, sizeof(int), cudaMemcpyHostToHost);
     }},
    {"MemcpyFromPageableMemory", cudaErrorStreamCaptureUnsupported,
     [](cudaStream_t s, int* scratch) {
       static int pageable = 1;
       return cudaMemcpyAsync(scratch, &pageable, sizeof(int), cudaMemcpyHostToDevice, s);
     }},
    {"LaunchOnTheLegacyStream", cudaErrorStreamCaptureImplicit,
     [](cudaStream_t, int* scratch) {
       TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, nullptr)(scratch, 1);
       return cudaPeekAtLastError();
     }},
    {"LaunchBeyondTheLimits", cudaErrorInvalidConfiguration,
     [](cudaStream_t s, int* scratch) {
       TPSERVE_LAUNCH(AppendDigit, 1, 1025, 0, s)(scratch, 1);
       return cudaPeekAtLastError();
     }},
};

class EmuCaptureRuleTest : public ::testing::TestWithParam<Violation> {};

TEST_P(EmuCaptureRuleTest, BreakingItFailsWithCudasCodeAndInvalidatesTheCapture) {
  Device<int> x(1), scratch(1);
  ASSERT_EQ(cudaMemset(x.ptr, 0, sizeof(int)), cudaSuccess);
  Stream st;
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, st.s)(x.ptr, 1);
  EXPECT_EQ(GetParam().call(st.s, scratch.ptr), GetParam().expected);
  EXPECT_EQ(cudaGetLastError(), GetParam().expected) << "left for cudaGetLastError too";
  cudaStreamCaptureStatus status;
  ASSERT_EQ(cudaStreamIsCapturing(st.s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, st.s)(x.ptr, 2);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureInvalidated) << "later work on the stream";
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(&status);
  EXPECT_EQ(cudaStreamEndCapture(st.s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  cudaGetLastError();
  // The capture is over: the stream runs work again, and nothing recorded ran.
  ASSERT_EQ(cudaStreamIsCapturing(st.s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  TPSERVE_LAUNCH(AppendDigit, 1, 1, 0, st.s)(x.ptr, 3);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(Read(x.ptr, 1)[0], 3);
}

INSTANTIATE_TEST_SUITE_P(Rules, EmuCaptureRuleTest, ::testing::ValuesIn(kViolations),
                         [](const ::testing::TestParamInfo<Violation>& info) { return std::string(info.param.name); });

TEST(EmuGraphTest, CaptureIsEndedByItsOwnThreadAndThreadLocalModeSparesOthersUnsafeCalls) {
  Stream st;
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaErrorIllegalState);
  cudaGetLastError();
  cudaError_t other_end = cudaSuccess, other_malloc = cudaErrorUnknown;
  std::thread([&] {
    cudaGraph_t g = nullptr;
    other_end = cudaStreamEndCapture(st.s, &g);
    void* p = nullptr;
    other_malloc = cudaMalloc(&p, 16);  // another thread may allocate in thread-local mode
    cudaFree(p);
  }).join();
  EXPECT_EQ(other_end, cudaErrorStreamCaptureWrongThread);
  EXPECT_EQ(other_malloc, cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(st.s, &graph), cudaSuccess) << "still open for the thread that began it";
  ASSERT_NE(graph, nullptr);
  cudaGraphDestroy(graph);

  // But no thread may put work on the legacy stream meanwhile (a host-staged
  // communicator's synchronous copy, say): the blocking stream's capture breaks.
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudaError_t other_copy = cudaSuccess;
  std::thread([&] {
    int src = 1, dst = 0;
    other_copy = cudaMemcpy(&dst, &src, sizeof(int), cudaMemcpyHostToHost);
  }).join();
  EXPECT_EQ(other_copy, cudaErrorStreamCaptureImplicit);
  EXPECT_EQ(cudaStreamEndCapture(st.s, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  EXPECT_EQ(cudaStreamEndCapture(st.s, &graph), cudaErrorIllegalState) << "no capture is open";
  cudaGetLastError();

  // In global mode an allocation on any thread breaks the capture.
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal), cudaSuccess);
  std::thread([&] {
    void* p = nullptr;
    other_malloc = cudaMalloc(&p, 16);
  }).join();
  EXPECT_EQ(other_malloc, cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(st.s, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeThreadLocal), cudaErrorStreamCaptureUnsupported)
      << "the legacy stream cannot capture";
  cudaGetLastError();
}

TEST(EmuGraphTest, AnEventRecordedIntoAnOpenCaptureCannotBeWaitedFor) {
  Stream st;
  cudaEvent_t event;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, st.s), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, st.s), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(event), cudaErrorCapturedEvent);
  cudaGetLastError();
  cudaGraphExec_t exec = EndAndInstantiate(st.s);
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(cudaGraphLaunch(exec, st.s), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaEventDestroy(event);
}

}  // namespace
}  // namespace tpserve::cuda
