// Streams, events and CUDA graph capture of the emulated runtime (inside
// cuda/emu/ only: runtime.cc and cublas.cc enqueue their work through it; the
// kernels' launches come through EnqueueLaunch in simt.h). capture.cc's
// header comment lists the rules of stream capture it holds the code to.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

namespace tpserve::cuda::emu {

// One operation of a stream (a launch, a copy, a memset, a GEMM, an event
// record): holds everything it reads by value or by address, as the GPU's
// copy of a launch does. Returns cudaSuccess or its error.
using StreamWork = std::function<cudaError_t()>;

// Enqueues `work` on `stream` (nullptr or cudaStreamLegacy: the legacy
// stream). Outside a capture it runs now, on the calling thread, before this
// returns. While `stream` captures, it is recorded instead, to run at every
// replay of the graph; `capturable` false (a copy from pageable host memory)
// invalidates the capture with cudaErrorStreamCaptureUnsupported. Work on the
// legacy stream while a stream captures invalidates that capture with
// cudaErrorStreamCaptureImplicit. Every error is also left for
// cudaGetLastError, as the runtime does.
cudaError_t Enqueue(cudaStream_t stream, StreamWork work, bool capturable = true);

// Before a call that stream capture forbids ("potentially unsafe": cudaMalloc,
// cudaFree, cudaFreeHost, cudaDeviceSynchronize): cudaErrorStreamCaptureUnsupported,
// invalidating the captures that forbid it (those this thread began in global
// or thread-local mode, and any thread's in global mode); cudaSuccess when none.
cudaError_t CheckUnsafeCall();

// Before a synchronous call on the legacy stream (cudaMemcpy, cudaMemset):
// cudaErrorStreamCaptureImplicit, invalidating every capture, while any stream
// captures (every emulated stream is a blocking one); cudaSuccess when none.
cudaError_t CheckLegacyStream();

}  // namespace tpserve::cuda::emu
