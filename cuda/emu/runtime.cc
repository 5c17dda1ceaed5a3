// The emulated CUDA runtime: the cudart functions the CUDA backend and its
// tests call, defined on the host for the emulation build (cuda/emu/simt.h).
// Device memory is host memory (one malloc per cudaMalloc, 0xff-filled, so
// reads of memory nobody wrote show up as NaN); streams and events are tokens:
// every operation, kernel launches included, completes before the call
// returns. Graph capture is not emulated (cudaErrorNotSupported).
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuda/emu/simt.h"

namespace {

constexpr size_t kEmulatedDeviceBytes = size_t{8} << 30;  // what cudaMemGetInfo reports as total

struct Heap {
  std::mutex mu;
  std::unordered_map<void*, size_t> sizes;  // live device allocations
  size_t used = 0;
};

Heap& TheHeap() {
  static Heap* heap = new Heap;
  return *heap;
}

cudaError_t Fail(cudaError_t err) {
  tpserve::cuda::emu::SetLastError(err);
  return err;
}

cudaStream_t NewToken() { return reinterpret_cast<cudaStream_t>(new char); }

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  Heap& h = TheHeap();
  std::lock_guard lock(h.mu);
  if (h.used + size > kEmulatedDeviceBytes) return Fail(cudaErrorMemoryAllocation);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, size);
  h.sizes[p] = size;
  h.used += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Heap& h = TheHeap();
  std::lock_guard lock(h.mu);
  auto it = h.sizes.find(ptr);
  if (it == h.sizes.end()) return Fail(cudaErrorInvalidValue);
  h.used -= it->second;
  h.sizes.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  *ptr = std::malloc(size == 0 ? 1 : size);
  return *ptr ? cudaSuccess : Fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Heap& h = TheHeap();
  std::lock_guard lock(h.mu);
  *free_bytes = kEmulatedDeviceBytes - h.used;
  *total_bytes = kEmulatedDeviceBytes;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind, cudaStream_t) {
  if (width > dpitch || width > spitch) return Fail(cudaErrorInvalidPitchValue);
  for (size_t row = 0; row < height && width > 0; ++row) {
    std::memmove(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch, width);
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (count > 0) std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  return cudaMemset(ptr, value, count);
}

cudaError_t cudaGetLastError(void) { return tpserve::cuda::emu::TakeLastError(); }
cudaError_t cudaPeekAtLastError(void) { return tpserve::cuda::emu::PeekLastError(); }

const char* cudaGetErrorString(cudaError_t err) {
  thread_local std::string text;
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory (emulated device)";
    case cudaErrorNotSupported: return "operation not supported by the CUDA emulation (cuda/emu/)";
    case cudaErrorInvalidConfiguration:
    case cudaErrorLaunchFailure:
      text = "emulated launch failed: " + tpserve::cuda::emu::LastReport();
      return text.c_str();
    default:
      text = "CUDA error " + std::to_string(static_cast<int>(err)) + " (emulated runtime)";
      return text.c_str();
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : Fail(cudaErrorInvalidDevice); }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "tpserve SIMT emulator (cuda/emu)", sizeof(prop->name) - 1);
  prop->totalGlobalMem = kEmulatedDeviceBytes;
  prop->major = 9;
  prop->minor = 0;
  prop->warpSize = tpserve::cuda::emu::kWarpSize;
  prop->maxThreadsPerBlock = static_cast<int>(tpserve::cuda::emu::kMaxThreadsPerBlock);
  prop->sharedMemPerBlock = tpserve::cuda::emu::kMaxSharedBytesPerBlock;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}

// One SM that runs one block at a time (blocks run one after another).
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, const void* func, int block_size, size_t) {
  if (func == nullptr || block_size <= 0 || block_size > static_cast<int>(tpserve::cuda::emu::kMaxThreadsPerBlock)) {
    return Fail(cudaErrorInvalidValue);
  }
  *num_blocks = 1;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = NewToken();
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }

// Graphs aside: capture is refused, so the backend's graph path is not taken.
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) { return Fail(cudaErrorNotSupported); }
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t*) { return Fail(cudaErrorNotSupported); }
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t*, cudaGraph_t, unsigned long long) {
  return Fail(cudaErrorNotSupported);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return Fail(cudaErrorNotSupported); }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }

}  // extern "C"
