// The emulated CUDA runtime: the cudart functions the CUDA backend and its
// tests call, defined on the host for the emulation build (cuda/emu/simt.h).
// Device memory is host memory (one malloc per cudaMalloc, 0xff-filled, so
// reads of memory nobody wrote show up as NaN); cudaMallocHost's memory is
// tracked as pinned. Streams, events and graph capture are in capture.cc
// (which lists the capture rules held): outside a capture every operation,
// kernel launches included, completes before the call returns; while a stream
// captures, what is enqueued on it is recorded for the graph's replays, and
// the calls capture forbids here (an allocation, a free, a device
// synchronisation, a synchronous copy on the legacy stream, an async copy
// from pageable memory) fail with CUDA's error codes and invalidate it.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cuda/emu/capture.h"
#include "cuda/emu/simt.h"

namespace {

using tpserve::cuda::emu::CheckLegacyStream;
using tpserve::cuda::emu::CheckUnsafeCall;
using tpserve::cuda::emu::Enqueue;

constexpr size_t kEmulatedDeviceBytes = size_t{8} << 30;  // what cudaMemGetInfo reports as total

struct Heap {
  std::mutex mu;
  std::map<const char*, size_t> sizes;   // live device allocations: base -> bytes
  std::map<const char*, size_t> pinned;  // live cudaMallocHost allocations: base -> bytes
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

// Whether [p, p + bytes) lies inside one allocation of `allocations`.
bool Inside(const std::map<const char*, size_t>& allocations, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = allocations.upper_bound(c);
  if (it == allocations.begin()) return false;
  --it;
  return c + bytes <= it->first + it->second;
}

// Whether a copy that touches dst_bytes from dst and src_bytes from src may be
// captured: a graph's copy to or from host memory needs pinned memory
// (cudaMallocHost), since the driver would stage pageable memory through a
// buffer at the call.
bool HostSidesPinned(void* dst, size_t dst_bytes, const void* src, size_t src_bytes, cudaMemcpyKind kind) {
  Heap& h = TheHeap();
  std::lock_guard lock(h.mu);
  const bool src_device = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDeviceToHost ||
                          (kind == cudaMemcpyDefault && Inside(h.sizes, src, src_bytes));
  const bool dst_device = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyHostToDevice ||
                          (kind == cudaMemcpyDefault && Inside(h.sizes, dst, dst_bytes));
  return (src_device || Inside(h.pinned, src, src_bytes)) && (dst_device || Inside(h.pinned, dst, dst_bytes));
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (const cudaError_t err = CheckUnsafeCall(); err != cudaSuccess) return err;
  Heap& h = TheHeap();
  std::lock_guard lock(h.mu);
  if (h.used + size > kEmulatedDeviceBytes) return Fail(cudaErrorMemoryAllocation);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, size);
  h.sizes[static_cast<const char*>(p)] = size;
  h.used += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (const cudaError_t err = CheckUnsafeCall(); err != cudaSuccess) return err;
  if (ptr == nullptr) return cudaSuccess;
  Heap& h = TheHeap();
  std::lock_guard lock(h.mu);
  auto it = h.sizes.find(static_cast<const char*>(ptr));
  if (it == h.sizes.end()) return Fail(cudaErrorInvalidValue);
  h.used -= it->second;
  h.sizes.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  *ptr = std::malloc(size == 0 ? 1 : size);
  if (*ptr == nullptr) return Fail(cudaErrorMemoryAllocation);
  Heap& h = TheHeap();
  std::lock_guard lock(h.mu);
  h.pinned[static_cast<const char*>(*ptr)] = size;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (const cudaError_t err = CheckUnsafeCall(); err != cudaSuccess) return err;
  if (ptr == nullptr) return cudaSuccess;
  Heap& h = TheHeap();
  std::lock_guard lock(h.mu);
  if (h.pinned.erase(static_cast<const char*>(ptr)) == 0) return Fail(cudaErrorInvalidValue);
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

// Synchronous copies and memsets run on the legacy stream.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  if (const cudaError_t err = CheckLegacyStream(); err != cudaSuccess) return err;
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

// dst and src are read when the copy runs: at each replay, when captured.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return Enqueue(
      stream,
      [=] {
        if (count > 0) std::memmove(dst, src, count);
        return cudaSuccess;
      },
      HostSidesPinned(dst, count, src, count, kind));
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  if (width > dpitch || width > spitch) return Fail(cudaErrorInvalidPitchValue);
  auto span = [&](size_t pitch) { return height == 0 ? 0 : (height - 1) * pitch + width; };  // bytes touched
  const bool pinned = HostSidesPinned(dst, span(dpitch), src, span(spitch), kind);
  return Enqueue(
      stream,
      [=] {
        for (size_t row = 0; row < height && width > 0; ++row) {
          std::memmove(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch, width);
        }
        return cudaSuccess;
      },
      pinned);
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (const cudaError_t err = CheckLegacyStream(); err != cudaSuccess) return err;
  if (count > 0) std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  return Enqueue(stream, [=] {
    if (count > 0) std::memset(ptr, value, count);
    return cudaSuccess;
  });
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
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorInvalidConfiguration:
    case cudaErrorLaunchFailure:
      text = "emulated launch failed: " + tpserve::cuda::emu::LastReport();
      return text.c_str();
    default:
      text = "CUDA error " + std::to_string(static_cast<int>(err)) + " (emulated runtime)";
      return text.c_str();
  }
}

const char* cudaGetErrorName(cudaError_t err) {
  thread_local std::string name;
  name = err == cudaSuccess ? "cudaSuccess" : "cudaError " + std::to_string(static_cast<int>(err));
  return name.c_str();
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
// The emulated device has no driver of its own: the toolkit's version for both.
cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : Fail(cudaErrorInvalidDevice); }
// Everything has run already; only capture forbids it.
cudaError_t cudaDeviceSynchronize(void) { return CheckUnsafeCall(); }

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

}  // extern "C"
