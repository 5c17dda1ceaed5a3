// Error checks for CUDA runtime, cuBLAS and NCCL calls.
//
// CUDA_CHECK(stmt) aborts with the failing statement, file, line, device and the
// runtime's message. These are for programming errors and broken devices inside
// the CUDA backend; errors that a user can cause (bad input, too little memory at
// start-up) are returned as absl::Status by the callers that can see them.
//
// TPSERVE_SYNC_CHECK() synchronises the device and checks for errors after a
// kernel launch in debug builds (NDEBUG undefined), and in release builds when
// the environment sets TPSERVE_CUDA_SYNC_CHECK=1 (read once; scripts/gpu-check.sh
// sets it for the tests), so a faulting kernel is reported at the op that
// launched it; otherwise release builds only check the launch. While this thread
// captures a CUDA graph (a synchronisation would invalidate the capture) it
// only checks the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace tpserve::cuda {

[[noreturn]] void FailCuda(const char* stmt, const char* file, int line, const char* what);

// Number of usable CUDA devices; 0 when there is no driver or no device (the
// runtime's error is treated as "no GPU", never as a crash). When there is
// none and `why` is given, it gets what the runtime said: the error's name
// and message from cudaGetDeviceCount and the driver's CUDA version from
// cudaDriverGetVersion (0 without a driver), so "no GPU" and "a driver too old
// for this runtime" read differently.
int DeviceCount(std::string* why = nullptr);

// True when the environment sets TPSERVE_REQUIRE_GPU=1 (read once):
// scripts/gpu-check.sh sets it for its tests and memcheck phases, where a GPU
// test that finds no device must fail, not skip (tests/cuda/gpu_test_util.h),
// so that a run which tested nothing cannot pass.
bool GpuRequiredByEnvironment();

// The stream this thread is capturing into a graph (cuda/cuda_graph.h sets it
// around a capture; nullptr when none), and whether that capture is active
// (cudaStreamIsCapturing), for TPSERVE_SYNC_CHECK.
void SetCaptureStream(cudaStream_t stream);
bool CapturingOnThisThread();

// Whether TPSERVE_CUDA_SYNC_CHECK=1 was set when first asked (release builds'
// TPSERVE_SYNC_CHECK synchronises after each launch only then).
bool SyncCheckFromEnvironment();

}  // namespace tpserve::cuda

#define CUDA_CHECK(stmt)                                                              \
  do {                                                                                \
    cudaError_t tpserve_err_ = (stmt);                                                \
    if (tpserve_err_ != cudaSuccess)                                                  \
      ::tpserve::cuda::FailCuda(#stmt, __FILE__, __LINE__, cudaGetErrorString(tpserve_err_)); \
  } while (0)

#ifndef NDEBUG
#define TPSERVE_SYNC_CHECK()                                                      \
  do {                                                                            \
    CUDA_CHECK(cudaGetLastError());                                               \
    if (!::tpserve::cuda::CapturingOnThisThread()) CUDA_CHECK(cudaDeviceSynchronize()); \
  } while (0)
#else
#define TPSERVE_SYNC_CHECK()                                                      \
  do {                                                                            \
    CUDA_CHECK(cudaGetLastError());                                               \
    if (::tpserve::cuda::SyncCheckFromEnvironment() &&                            \
        !::tpserve::cuda::CapturingOnThisThread())                                \
      CUDA_CHECK(cudaDeviceSynchronize());                                        \
  } while (0)
#endif

// CUBLAS_CHECK(stmt): like CUDA_CHECK for cuBLAS calls (cublasStatus_t, passed on
// as an int so this header needs no cuBLAS include); aborts with the statement,
// file, line, device and cuBLAS's name for the status (cuda/cublas_check.cc).
namespace tpserve::cuda {
[[noreturn]] void FailCublas(const char* stmt, const char* file, int line, int status);
}  // namespace tpserve::cuda

#define CUBLAS_CHECK(stmt)                                                   \
  do {                                                                       \
    const int tpserve_cublas_status_ = static_cast<int>(stmt);               \
    if (tpserve_cublas_status_ != 0)                                         \
      ::tpserve::cuda::FailCublas(#stmt, __FILE__, __LINE__, tpserve_cublas_status_); \
  } while (0)
