// The SIMT runner: CUDA kernels built as host C++ (TPSERVE_CUDA_EMU, through
// cuda/simt.cuh) and executed on the CPU, for tests. Test-only: nothing that
// serves links it.
//
// A launch runs its blocks one after another on the calling thread. The
// threads of a block are fibers (a register switch in simt.cc, x86-64) switched
// by a scheduler at the points where CUDA threads wait for each other; warps
// run one at a time up to the next block barrier, in alternating order, so one
// warp runs ahead of the others as a GPU may let it:
//   * __syncthreads: a block barrier. Every thread of the block must reach the
//     same __syncthreads (the same source line); a thread that exits while
//     others wait, or threads waiting at different barriers, fail the launch.
//   * warp operations (__shfl*_sync, __syncwarp, __ballot/__any/__all_sync):
//     lock-step exchanges inside each warp of 32. The lanes that arrive must be
//     exactly the lanes the mask names, with the same mask at the same line;
//     otherwise the launch fails instead of hanging.
// Shared memory is allocated per block, per variable (TPSERVE_SHARED*) and for
// the dynamic part sized by the launch, filled with 0xff bytes (a float NaN) so
// a read of shared memory nobody wrote shows up in the output. Emulated device
// memory (cuda/emu/runtime.cc) is one malloc per cudaMalloc of exactly the
// bytes asked, so under AddressSanitizer (the emulation tests are built with
// it) every global or shared access outside what the launch declared is
// reported with the kernel's source line.
// A launch beyond sm_80/sm_90 limits (threads per block, block and grid
// dimensions, 48 KiB of shared memory per block without an opt-in) fails
// before it runs. So does a 16-byte access (cuda/vec.cuh) at an address that
// is not a multiple of 16, which x86 would take and the GPU faults on.
//
// A launch goes to its stream (EnqueueLaunch, cuda/emu/capture.cc): it runs
// there and then, or, while the stream captures a CUDA graph, it is recorded
// with copies of its arguments and runs at every replay of the graph (a
// programmatic one counts and is checked at each). capture.cc's header lists
// the rules of stream capture held and those not modelled.
//
// A failed launch sets the error cudaGetLastError returns
// (cudaErrorInvalidConfiguration or cudaErrorLaunchFailure) and LastReport()
// says which kernel, block, thread and line, and why (cudaGetErrorString in the
// emulated runtime returns it too).
//
// A programmatic launch (TPSERVE_LAUNCH_PDL, cuda/simt.cuh) runs like any
// other, after the previous one has finished (a schedule the GPU may also
// pick); every one of its threads must have called TPSERVE_GRID_DEPENDENCY_WAIT()
// by the time it exits, or the launch fails. What a kernel touches before its
// wait is not checked (the previous launch has always finished here), so the
// rule of cuda/simt.cuh holds by review: nothing before the wait but weights,
// the step's uploaded metadata and earlier steps' KV cache.
// Not modelled: timing and scheduling between blocks (they run in order, or
// in reverse: RunLaunch), the memory model between blocks and between threads
// without a barrier (a missing __threadfence passes here), and the GPU's
// rounding of __expf and rsqrtf (the host's exp and sqrt are used).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <string>
#include <type_traits>

namespace tpserve::cuda::emu {

// sm_80 and sm_90 limits a launch is held to.
inline constexpr unsigned kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDimXY = 1024, kMaxBlockDimZ = 64;
inline constexpr unsigned kMaxGridDimX = 0x7fffffffu, kMaxGridDimYZ = 65535;
// Static plus dynamic shared memory per block without cudaFuncSetAttribute's
// opt-in (which no kernel here uses).
inline constexpr size_t kMaxSharedBytesPerBlock = 48 * 1024;
inline constexpr int kWarpSize = 32;

struct LaunchConfig {
  const char* kernel = "";  // the kernel's name as written at the launch
  dim3 grid, block;
  size_t dynamic_shared = 0;  // bytes
  // Launched with programmatic dependent launch (TPSERVE_LAUNCH_PDL): every
  // thread must call TPSERVE_GRID_DEPENDENCY_WAIT() or the launch fails.
  bool programmatic = false;
};

// Runs `thread_body` once per thread of every block of the launch; cudaSuccess,
// or the error with LastReport() saying why. Blocks run in grid order (x
// fastest, then y, then z), or in the reverse of it when the environment
// variable TPSERVE_EMU_REVERSE_BLOCKS is set to anything but "0" when the
// launch starts (read at every launch): correct kernels give the same
// results either way, as a GPU may run blocks in any order.
cudaError_t RunLaunch(const LaunchConfig& config, const std::function<void()>& thread_body);

// The launch's configuration against the limits above: cudaSuccess, or
// cudaErrorInvalidConfiguration with LastReport() saying why.
cudaError_t CheckLaunchConfig(const LaunchConfig& config);

// A launch on `stream` (cuda/emu/capture.cc): RunLaunch now, or, while the
// stream captures a graph, the configuration checked and the launch recorded
// (`thread_body` holds the kernel's arguments by value) to run at every replay.
// The error, if any, is also left for cudaGetLastError.
cudaError_t EnqueueLaunch(cudaStream_t stream, const LaunchConfig& config, std::function<void()> thread_body);

// Programmatic (PDL) launches run so far in this process, on every host thread
// (tests check that the switch that turns PDL off does).
int64_t ProgrammaticLaunches();

// TPSERVE_GRID_DEPENDENCY_WAIT(): records that the calling thread waited. The
// blocks of consecutive launches run in order here, so the previous grid has
// always finished: waiting is a no-op, a legal schedule of the GPU's.
void GridDependencyWait();

// The report of this host thread's last failed launch ("" when none failed).
const std::string& LastReport();

// The error cudaGetLastError returns (and clears) on this host thread.
void SetLastError(cudaError_t err);
cudaError_t PeekLastError();
cudaError_t TakeLastError();

// The calling CUDA thread's coordinates (inside a launch only).
const uint3& ThreadIdx();
const uint3& BlockIdx();
const dim3& BlockDim();
const dim3& GridDim();

void SyncThreads(std::source_location site);

enum class WarpOpKind { kShflIdx, kShflXor, kShflUp, kShflDown, kSyncWarp, kBallot, kAny, kAll, kCollective };
// One lane's part of a warp operation: `value` (up to 8 bytes) and `arg` (source
// lane, lane mask or delta); returns what the lane receives.
uint64_t WarpOp(WarpOpKind kind, unsigned mask, uint64_t value, int arg, int width, std::source_location site);

// A warp-collective instruction of the whole warp (the tensor-core mma of
// cuda/mma.cuh): every one of the 32 lanes calls it at the same line with its
// own `in` and `out` buffers; once all have arrived, `fn` runs once with the
// 32 lanes' buffers, indexed by lane (in[l], out[l]), and then every lane
// continues. The sizes are the caller's business (each lane passes the same
// kind of buffer). A lane missing, or waiting elsewhere, fails the launch as
// a shuffle would.
using WarpCollectiveFn = void (*)(const void* const* in, void* const* out);
void WarpCollective(const void* in, void* out, WarpCollectiveFn fn, std::source_location site);

// A vector access the GPU would fault on ("misaligned address"): `p` is not a
// multiple of `alignment` bytes. Fails the launch, naming the access's size;
// called by cuda/vec.cuh's loads and stores only when the address is off (x86
// itself would take any address).
[[noreturn]] void Misaligned(const void* p, size_t alignment, const char* access);

// The block's instance of the shared variable declared at `tag` (bytes, 0xff-filled).
void* SharedVariable(const void* tag, size_t bytes, const char* name);
// The block's dynamic shared memory (LaunchConfig::dynamic_shared bytes).
void* DynamicShared();

template <typename T>
uint64_t ToBits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp exchanges carry up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// What TPSERVE_LAUNCH(kernel, ...) returns: called with the kernel's arguments.
template <typename Kernel>
struct Launcher {
  LaunchConfig config;
  cudaStream_t stream;
  Kernel* kernel;
  // By value, like a launch's arguments (arrays decay); the launch keeps its
  // own copies, so a captured launch replays with the values of this call.
  template <typename... Args>
  void operator()(Args... args) const {
    (void)EnqueueLaunch(stream, config, [kernel = kernel, args...] { kernel(args...); });
  }
};

template <typename Kernel>
Launcher<Kernel> MakeLauncher(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                              Kernel* kernel, bool programmatic = false) {
  return {LaunchConfig{name, grid, block, shared_bytes, programmatic}, stream, kernel};
}

}  // namespace tpserve::cuda::emu

// ---- CUDA's names, for kernels built as host C++ ----

#define __launch_bounds__(...)
#define threadIdx (::tpserve::cuda::emu::ThreadIdx())
#define blockIdx (::tpserve::cuda::emu::BlockIdx())
#define blockDim (::tpserve::cuda::emu::BlockDim())
#define gridDim (::tpserve::cuda::emu::GridDim())

#define TPSERVE_SHARED(T, name)                                                                    \
  static const char tpserve_shared_tag_##name = 0;                                                 \
  T& name = *static_cast<T*>(::tpserve::cuda::emu::SharedVariable(&tpserve_shared_tag_##name,      \
                                                                   sizeof(T), #name))
#define TPSERVE_SHARED_ARRAY(T, name, n)                                                           \
  static const char tpserve_shared_tag_##name = 0;                                                 \
  T* const name = static_cast<T*>(::tpserve::cuda::emu::SharedVariable(&tpserve_shared_tag_##name, \
                                                                       sizeof(T) * (n), #name))
#define TPSERVE_DYNAMIC_SHARED(T, name) T* const name = static_cast<T*>(::tpserve::cuda::emu::DynamicShared())
#define TPSERVE_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::tpserve::cuda::emu::MakeLauncher(#kernel, (grid), (block), (shared_bytes), (stream), &kernel)
#define TPSERVE_LAUNCH_PDL(grid, block, shared_bytes, stream, programmatic, ...)                      \
  ::tpserve::cuda::emu::MakeLauncher(#__VA_ARGS__, (grid), (block), (shared_bytes), (stream), &__VA_ARGS__, \
                                     (programmatic))
#define TPSERVE_GRID_DEPENDENCY_WAIT() ::tpserve::cuda::emu::GridDependencyWait()
#define TPSERVE_GRID_DEPENDENTS_LAUNCH() ((void)0)

inline void __syncthreads(std::source_location site = std::source_location::current()) {
  ::tpserve::cuda::emu::SyncThreads(site);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location site = std::source_location::current()) {
  ::tpserve::cuda::emu::WarpOp(::tpserve::cuda::emu::WarpOpKind::kSyncWarp, mask, 0, 0, 32, site);
}

#define TPSERVE_EMU_SHFL(name, kind)                                                                     \
  template <typename T>                                                                                  \
  T name(unsigned mask, T v, int arg, int width = 32,                                                    \
         std::source_location site = std::source_location::current()) {                                \
    using ::tpserve::cuda::emu::FromBits;                                                                \
    return FromBits<T>(::tpserve::cuda::emu::WarpOp(::tpserve::cuda::emu::WarpOpKind::kind, mask,        \
                                                    ::tpserve::cuda::emu::ToBits(v), arg, width, site)); \
  }
TPSERVE_EMU_SHFL(__shfl_sync, kShflIdx)
TPSERVE_EMU_SHFL(__shfl_xor_sync, kShflXor)
TPSERVE_EMU_SHFL(__shfl_up_sync, kShflUp)
TPSERVE_EMU_SHFL(__shfl_down_sync, kShflDown)
#undef TPSERVE_EMU_SHFL

inline unsigned __ballot_sync(unsigned mask, int pred, std::source_location site = std::source_location::current()) {
  return static_cast<unsigned>(
      ::tpserve::cuda::emu::WarpOp(::tpserve::cuda::emu::WarpOpKind::kBallot, mask, pred != 0, 0, 32, site));
}
inline int __any_sync(unsigned mask, int pred, std::source_location site = std::source_location::current()) {
  return static_cast<int>(
      ::tpserve::cuda::emu::WarpOp(::tpserve::cuda::emu::WarpOpKind::kAny, mask, pred != 0, 0, 32, site));
}
inline int __all_sync(unsigned mask, int pred, std::source_location site = std::source_location::current()) {
  return static_cast<int>(
      ::tpserve::cuda::emu::WarpOp(::tpserve::cuda::emu::WarpOpKind::kAll, mask, pred != 0, 0, 32, site));
}

// Atomics return the old value, like CUDA's.
template <typename T>
T atomicAdd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_add(v);
}
template <typename T>
T atomicOr(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_or(v);
}
template <typename T>
T atomicMax(T* address, T v) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

// Memory fences and cache-hinted loads between blocks (the "last block"
// pattern of cuda/sampling_sliced.cu): a launch's blocks run one after
// another on one host thread, so whatever a block stored is already there
// for every block after it. The fence is nothing and __ldcg (a load that
// bypasses L1 on the GPU) a plain load; the order blocks run in may be
// reversed (TPSERVE_EMU_REVERSE_BLOCKS, RunLaunch) to show code that relies
// on which block arrives last.
inline void __threadfence() {}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}

// Math intrinsics: the host's correctly rounded functions (not the GPU's
// approximations).
inline float __expf(float x) { return std::exp(x); }
// The rounded operations kernels spell out so that no compiler contracts
// them differently (cuda/norm_rope_rows.cuh): the same single roundings here.
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __int_as_float(unsigned bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline float __uint_as_float(unsigned bits) { return __int_as_float(bits); }
inline unsigned __float_as_uint(float f) {
  unsigned bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }
