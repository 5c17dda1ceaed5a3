// Streams, events and CUDA graphs of the emulated runtime.
//
// A stream is a capture state; outside a capture every operation runs on the
// calling thread before the call returns (so events complete at once and
// synchronising is free). cudaStreamBeginCapture switches the stream to
// recording: each operation enqueued on it (kernel launches, plain and
// programmatic, with their arguments copied; cudaMemcpyAsync / 2D / MemsetAsync;
// cublasGemmEx on a handle bound to it, alpha and beta read at the call;
// event records; graph launches, as a child graph) is appended to the capture
// instead of run. cudaStreamEndCapture hands the list over as a graph,
// cudaGraphInstantiate shares it with an executable graph, and every
// cudaGraphLaunch runs it in order on the calling thread, so a copy from host
// memory reads that memory at replay, as the GPU does, and a programmatic
// launch counts (ProgrammaticLaunches) and is held to the wait rule at each
// replay. A launch that fails at replay stops it; cudaGraphLaunch returns the
// error (the GPU would report it later, at a synchronisation).
//
// The rules of stream capture modelled, with CUDA's error codes (a call that
// breaks one also invalidates the capture it breaks: every later operation on
// that stream is cudaErrorStreamCaptureInvalidated, and cudaStreamEndCapture
// returns that with a null graph, ending the capture):
//   * cudaStreamSynchronize of a capturing stream: cudaErrorStreamCaptureUnsupported;
//   * a copy between a capturing stream and pageable host memory (not from
//     cudaMallocHost): cudaErrorStreamCaptureUnsupported;
//   * cudaMalloc, cudaFree, cudaFreeHost, cudaDeviceSynchronize on a thread
//     that began a capture in global or thread-local mode, or on any thread
//     while a global-mode capture is open: cudaErrorStreamCaptureUnsupported;
//   * any work on the legacy stream (stream 0 or cudaStreamLegacy: a launch,
//     an async copy, cuBLAS on a handle without a stream, an event record,
//     cudaStreamSynchronize(0)) and the synchronous cudaMemcpy / cudaMemset,
//     from any thread, while a stream captures (every emulated stream is a
//     blocking one): cudaErrorStreamCaptureImplicit, invalidating every open
//     capture;
//   * cudaEventSynchronize of an event recorded into a capture still open:
//     cudaErrorCapturedEvent;
//   * cudaStreamBeginCapture on the legacy stream: cudaErrorStreamCaptureUnsupported;
//     on a stream already capturing, or cudaStreamEndCapture on one that is not:
//     cudaErrorIllegalState;
//   * cudaStreamEndCapture from another thread than the one that began a
//     global or thread-local capture: cudaErrorStreamCaptureWrongThread (the
//     capture stays open for its own thread to end);
//   * a launch whose configuration is invalid is refused at capture
//     (cudaErrorInvalidConfiguration) and invalidates the capture.
// Not modelled: streams joining a capture through events (cudaStreamWaitEvent
// is not emulated), non-blocking streams and the per-thread default stream,
// cudaThreadExchangeStreamCaptureMode, the relaxed mode's remaining
// restrictions, restrictions on cudaMallocHost and on queries (cudaStreamQuery,
// cudaEventQuery are not emulated), an event recorded in a capture that has
// ended (synchronising it succeeds here), graph updates and device-side graph
// launches, and concurrency between streams (each operation runs whole).
#include "cuda/emu/capture.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cuda/emu/simt.h"

namespace tpserve::cuda::emu {
namespace {

ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);  // every stream's and event's capture state

}  // namespace
}  // namespace tpserve::cuda::emu

// The runtime's opaque handle types, defined here.
struct CUstream_st {
  cudaStreamCaptureStatus status ABSL_GUARDED_BY(tpserve::cuda::emu::g_mu) = cudaStreamCaptureStatusNone;
  cudaStreamCaptureMode mode ABSL_GUARDED_BY(tpserve::cuda::emu::g_mu) = cudaStreamCaptureModeGlobal;
  std::thread::id thread ABSL_GUARDED_BY(tpserve::cuda::emu::g_mu);  // that began the capture
  uint64_t capture_id ABSL_GUARDED_BY(tpserve::cuda::emu::g_mu) = 0;  // of the open capture
  std::vector<tpserve::cuda::emu::StreamWork> recorded ABSL_GUARDED_BY(tpserve::cuda::emu::g_mu);
};
struct CUevent_st {
  // The capture the event was last recorded into (nullptr: recorded eagerly or never).
  cudaStream_t captured_in ABSL_GUARDED_BY(tpserve::cuda::emu::g_mu) = nullptr;
  uint64_t capture_id ABSL_GUARDED_BY(tpserve::cuda::emu::g_mu) = 0;
  // When the record last ran (for cudaEventElapsedTime): the host's clock, since
  // the emulated stream runs each operation whole when it is reached.
  std::atomic<int64_t> ran_ns{0};
};
struct CUgraph_st {
  std::shared_ptr<const std::vector<tpserve::cuda::emu::StreamWork>> ops;  // in capture order
};
struct CUgraphExec_st {
  std::shared_ptr<const std::vector<tpserve::cuda::emu::StreamWork>> ops;
};

namespace tpserve::cuda::emu {
namespace {

std::vector<cudaStream_t>& Capturing() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {  // streams with an open capture
  static auto* streams = new std::vector<cudaStream_t>;
  return *streams;
}
uint64_t g_next_capture_id ABSL_GUARDED_BY(g_mu) = 1;

cudaError_t Fail(cudaError_t err) {
  SetLastError(err);
  return err;
}

bool IsLegacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread; }

void InvalidateLocked(cudaStream_t s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  if (s->status != cudaStreamCaptureStatusActive) return;
  s->status = cudaStreamCaptureStatusInvalidated;
  s->recorded.clear();
}

// Work on the legacy stream waits for every blocking stream, so it cannot
// run while one captures.
cudaError_t LegacyConflictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  bool any = false;
  for (cudaStream_t s : Capturing()) {
    any = any || s->status == cudaStreamCaptureStatusActive;
    InvalidateLocked(s);
  }
  return any ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

void EndCaptureLocked(cudaStream_t s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  s->status = cudaStreamCaptureStatusNone;
  s->recorded.clear();
  auto& open = Capturing();
  open.erase(std::remove(open.begin(), open.end(), s), open.end());
}

cudaError_t RunAll(const std::vector<StreamWork>& ops) {
  for (const StreamWork& op : ops) {
    if (const cudaError_t err = op(); err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t Enqueue(cudaStream_t stream, StreamWork work, bool capturable) {
  {
    absl::MutexLock lock(&g_mu);
    if (IsLegacy(stream)) {
      if (const cudaError_t err = LegacyConflictLocked(); err != cudaSuccess) return Fail(err);
    } else if (stream->status == cudaStreamCaptureStatusInvalidated) {
      return Fail(cudaErrorStreamCaptureInvalidated);
    } else if (stream->status == cudaStreamCaptureStatusActive) {
      if (!capturable) {
        InvalidateLocked(stream);
        return Fail(cudaErrorStreamCaptureUnsupported);
      }
      stream->recorded.push_back(std::move(work));
      return cudaSuccess;
    }
  }
  return Fail(work());  // Fail leaves cudaSuccess alone
}

cudaError_t CheckUnsafeCall() {
  absl::MutexLock lock(&g_mu);
  const std::thread::id me = std::this_thread::get_id();
  bool forbidden = false;
  for (cudaStream_t s : Capturing()) {
    if (s->status != cudaStreamCaptureStatusActive) continue;
    if (s->mode == cudaStreamCaptureModeGlobal || (s->mode == cudaStreamCaptureModeThreadLocal && s->thread == me)) {
      InvalidateLocked(s);
      forbidden = true;
    }
  }
  return forbidden ? Fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t CheckLegacyStream() {
  absl::MutexLock lock(&g_mu);
  return Fail(LegacyConflictLocked());
}

cudaError_t EnqueueLaunch(cudaStream_t stream, const LaunchConfig& config, std::function<void()> body) {
  bool capturing = false;
  if (!IsLegacy(stream)) {
    absl::MutexLock lock(&g_mu);
    capturing = stream->status == cudaStreamCaptureStatusActive;
  }
  if (capturing) {  // refused now, as the GPU refuses it at the launch, not at a replay
    if (const cudaError_t err = CheckLaunchConfig(config); err != cudaSuccess) {
      absl::MutexLock lock(&g_mu);
      InvalidateLocked(stream);
      return Fail(err);
    }
  }
  return Enqueue(stream, [config, body = std::move(body)] { return RunLaunch(config, body); });
}

}  // namespace tpserve::cuda::emu

using tpserve::cuda::emu::Enqueue;
using tpserve::cuda::emu::Fail;
using tpserve::cuda::emu::g_mu;

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (tpserve::cuda::emu::IsLegacy(stream)) return Fail(cudaErrorInvalidResourceHandle);
  {
    absl::MutexLock lock(&g_mu);
    tpserve::cuda::emu::EndCaptureLocked(stream);  // a capture left open is dropped with its stream
  }
  delete stream;
  return cudaSuccess;
}

// Every operation has run already; a capturing stream cannot be waited for.
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  absl::MutexLock lock(&g_mu);
  if (tpserve::cuda::emu::IsLegacy(stream)) return Fail(tpserve::cuda::emu::LegacyConflictLocked());
  if (stream->status == cudaStreamCaptureStatusNone) return cudaSuccess;
  const bool was_active = stream->status == cudaStreamCaptureStatusActive;
  tpserve::cuda::emu::InvalidateLocked(stream);
  return Fail(was_active ? cudaErrorStreamCaptureUnsupported : cudaErrorStreamCaptureInvalidated);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

// Milliseconds between the two records' runs (host time: the emulator's, not a GPU's).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return Fail(cudaErrorInvalidValue);
  const int64_t a = start->ran_ns.load(), b = end->ran_ns.load();
  if (a == 0 || b == 0) return Fail(cudaErrorInvalidResourceHandle);  // not recorded (or not run) yet
  *ms = static_cast<float>(static_cast<double>(b - a) * 1e-6);
  return cudaSuccess;
}

// The host function runs when the stream reaches it: at once (streams are
// synchronous here), or at each replay of a graph that captured it.
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  if (fn == nullptr) return Fail(cudaErrorInvalidValue);
  return Enqueue(stream, [fn, data] {
    fn(data);
    return cudaSuccess;
  });
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  const cudaError_t err = Enqueue(stream, [event] {  // completes when it runs
    event->ran_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count());
    return cudaSuccess;
  });
  if (err != cudaSuccess || tpserve::cuda::emu::IsLegacy(stream)) return err;
  absl::MutexLock lock(&g_mu);
  const bool captured = stream->status == cudaStreamCaptureStatusActive;
  event->captured_in = captured ? stream : nullptr;
  event->capture_id = captured ? stream->capture_id : 0;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  absl::MutexLock lock(&g_mu);
  const cudaStream_t s = event->captured_in;
  if (s != nullptr && s->status != cudaStreamCaptureStatusNone && s->capture_id == event->capture_id) {
    return Fail(cudaErrorCapturedEvent);  // its "completion" is a node of a graph not yet built
  }
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (tpserve::cuda::emu::IsLegacy(stream)) return Fail(cudaErrorStreamCaptureUnsupported);
  absl::MutexLock lock(&g_mu);
  if (stream->status != cudaStreamCaptureStatusNone) return Fail(cudaErrorIllegalState);
  stream->status = cudaStreamCaptureStatusActive;
  stream->mode = mode;
  stream->thread = std::this_thread::get_id();
  stream->capture_id = tpserve::cuda::emu::g_next_capture_id++;
  stream->recorded.clear();
  tpserve::cuda::emu::Capturing().push_back(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  if (tpserve::cuda::emu::IsLegacy(stream)) return Fail(cudaErrorIllegalState);
  absl::MutexLock lock(&g_mu);
  if (stream->status == cudaStreamCaptureStatusNone) return Fail(cudaErrorIllegalState);
  if (stream->mode != cudaStreamCaptureModeRelaxed && stream->thread != std::this_thread::get_id()) {
    return Fail(cudaErrorStreamCaptureWrongThread);
  }
  const bool invalidated = stream->status == cudaStreamCaptureStatusInvalidated;
  if (!invalidated) {
    *graph = new CUgraph_st{std::make_shared<const std::vector<tpserve::cuda::emu::StreamWork>>(
        std::move(stream->recorded))};
  }
  tpserve::cuda::emu::EndCaptureLocked(stream);
  return invalidated ? Fail(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  absl::MutexLock lock(&g_mu);
  if (tpserve::cuda::emu::IsLegacy(stream)) {
    *status = cudaStreamCaptureStatusNone;
    // Asking the legacy stream while a blocking stream captures is itself an implicit dependency.
    return Fail(tpserve::cuda::emu::LegacyConflictLocked());
  }
  *status = stream->status;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return Fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->ops};
  return cudaSuccess;
}

// Replays the graph's operations in order, now, or records the replay into a
// capture on `stream` (a child graph).
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return Fail(cudaErrorInvalidValue);
  return Enqueue(stream, [ops = exec->ops] { return tpserve::cuda::emu::RunAll(*ops); });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

}  // extern "C"
