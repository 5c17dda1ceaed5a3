#include "backend/cpu_gemm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/check.h"

// The portable kernel: GCC/Clang vectors of 4 floats, each multiply-add an
// std::fma (one rounding, as the FMA instructions of the other kernels; an
// instruction on Arm and on x86-64 built for FMA, a library call otherwise).
// This file is also compiled with -ffp-contract=off (backend/CMakeLists.txt).
namespace tpserve {
namespace {

using F4 = float __attribute__((vector_size(16)));

struct V {
  using Reg = F4;
  static constexpr int kLanes = 4, kRows = 4, kVecs = 2, kSmallRows = 0;  // no transpose: always packs
  static Reg Zero() { return Reg{}; }
  static Reg Load(const float* p) {
    Reg v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void Store(float* p, Reg v) { std::memcpy(p, &v, sizeof v); }
  static Reg Broadcast(float v) { return Reg{v, v, v, v}; }
  static Reg Fma(Reg a, Reg b, Reg acc) {
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(a[l], b[l], acc[l]);
    return acc;
  }
  static Reg Add(Reg a, Reg b) { return a + b; }
  static void Transpose(Reg*) {}  // unused: kSmallRows = 0
  static void PackPanel(const float* w, int64_t ldw, int rows, int64_t kc, float* out);
};

}  // namespace
}  // namespace tpserve

#include "backend/cpu_gemm_kernel.h"

namespace tpserve {
namespace {

void V::PackPanel(const float* w, int64_t ldw, int rows, int64_t kc, float* out) {
  PackPanelPlain<kLanes * kVecs>(w, ldw, rows, 0, kc, out);
}

using cpu_gemm_internal::GemmColumnsFn;

void GemmColumnsPortable(const float* x, const float* w, float* y, int64_t M, int64_t ldy, int64_t K,
                         int64_t n0, int64_t n1, int64_t block_k, float* pack) {
  GemmColumns(x, w, y, M, ldy, K, n0, n1, block_k, pack);
}

GemmColumnsFn KernelFunction(CpuGemmKernel kernel) {
  switch (kernel) {
#if defined(__x86_64__)
    case CpuGemmKernel::kAvx2: return cpu_gemm_internal::GemmColumnsAvx2;
    case CpuGemmKernel::kAvx512: return cpu_gemm_internal::GemmColumnsAvx512;
#endif
    default: return GemmColumnsPortable;
  }
}

// Below this many multiply-adds a GEMM runs on the calling thread: waking a
// worker costs more than it saves.
constexpr int64_t kParallelWork = int64_t{1} << 18;
// Threads take the output columns in chunks of whole panels of every kernel:
// a slab's worth for many rows, one panel for a few, and at least
// kChunksPerThread chunks a thread where N allows, so a thread the OS
// descheduled (2 cores, other processes) leaves its share to the others.
constexpr int64_t kChunkAlign = cpu_gemm_internal::kMaxPanelColumns;
constexpr int64_t kChunksPerThread = 4;

// This thread's pack buffer (cpu_gemm_kernel.h), allocated at its first GEMM.
float* PackBuffer() {
  struct Buffer {
    float* data = nullptr;
    ~Buffer() { std::free(data); }
  };
  constexpr size_t kBytes = cpu_gemm_internal::PackFloats(kCpuGemmBlockK) * sizeof(float);
  static_assert(kBytes % 64 == 0);
  thread_local Buffer buffer;
  if (buffer.data == nullptr) {
    buffer.data = static_cast<float*>(std::aligned_alloc(64, kBytes));
    TPSERVE_CHECK(buffer.data != nullptr, "CpuGemm: out of memory for a ", kBytes, "-byte pack buffer");
  }
  return buffer.data;
}

// The y columns [n0, n1) start as the bias, or zeros.
void InitColumns(const float* bias, float* y, int64_t M, int64_t N, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < M; ++m) {
    float* row = y + m * N;
    if (bias) {
      std::memcpy(row + n0, bias + n0, static_cast<size_t>(n1 - n0) * sizeof(float));
    } else {
      std::memset(row + n0, 0, static_cast<size_t>(n1 - n0) * sizeof(float));
    }
  }
}

struct GemmJob {
  GemmColumnsFn fn;
  const float *x, *w, *bias;
  float* y;
  int64_t M, N, K;
  int64_t chunk;                     // output columns a chunk (a multiple of kChunkAlign)
  int64_t num_chunks;
  std::atomic<int64_t> next{0};      // the next chunk to take
};

// Takes chunks of the y columns until none is left (every thread of the GEMM).
void RunChunks(void* ctx) {
  GemmJob& job = *static_cast<GemmJob*>(ctx);
  for (int64_t c = job.next.fetch_add(1, std::memory_order_relaxed); c < job.num_chunks;
       c = job.next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t n0 = c * job.chunk, n1 = std::min(job.N, n0 + job.chunk);
    InitColumns(job.bias, job.y, job.M, job.N, n0, n1);
    job.fn(job.x, job.w, job.y, job.M, job.N, job.K, n0, n1, kCpuGemmBlockK, PackBuffer());
  }
}

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins on `a` for up to kSpin while it equals `old`, then sleeps on it;
// returns its new value.
template <typename T>
T AwaitChange(const std::atomic<T>& a, T old) {
  constexpr auto kSpin = std::chrono::microseconds(50);
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
    if ((i & 31) == 31 && std::chrono::steady_clock::now() > until) break;
    Pause();
  }
  for (;;) {
    a.wait(old, std::memory_order_acquire);
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

}  // namespace

const char* CpuGemmKernelName(CpuGemmKernel kernel) {
  switch (kernel) {
    case CpuGemmKernel::kPortable: return "portable";
    case CpuGemmKernel::kAvx2: return "avx2";
    case CpuGemmKernel::kAvx512: return "avx512";
  }
  return "?";
}

bool CpuGemmSupported(CpuGemmKernel kernel) {
  switch (kernel) {
    case CpuGemmKernel::kPortable: return true;
#if defined(__x86_64__)
    case CpuGemmKernel::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuGemmKernel::kAvx512: return __builtin_cpu_supports("avx512f");
#endif
    default: return false;
  }
}

CpuGemmKernel CpuGemmSelected() {
  static const CpuGemmKernel selected = [] {
    for (CpuGemmKernel k : {CpuGemmKernel::kAvx512, CpuGemmKernel::kAvx2}) {
      if (CpuGemmSupported(k)) return k;
    }
    return CpuGemmKernel::kPortable;
  }();
  return selected;
}

CpuGemmThreads::CpuGemmThreads(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { Work(); });
}

CpuGemmThreads::~CpuGemmThreads() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void CpuGemmThreads::Work() {
  uint32_t seen = 0;
  for (;;) {
    seen = AwaitChange(generation_, seen);
    if (stop_.load(std::memory_order_relaxed)) return;
    // Join the job of generation `seen` unless its caller closed it.
    uint64_t gate = gate_.load(std::memory_order_acquire);
    bool joined = false;
    while ((gate >> 32) == seen && (gate & kClosed) == 0) {
      if (gate_.compare_exchange_weak(gate, gate + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    task_(ctx_);
    gate = gate_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if ((gate & kInside) == 0 && (gate & kClosed) != 0) gate_.notify_all();  // the caller waits
  }
}

void CpuGemmThreads::Run(void (*task)(void* ctx), void* ctx) {
  if (workers_.empty()) return task(ctx);
  task_ = task;
  ctx_ = ctx;
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  gate_.store(uint64_t{generation} << 32, std::memory_order_relaxed);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();
  task(ctx);
  // Close the job: a worker that has not joined yet never will; wait for
  // those inside (the task's shared queue is empty, so they are finishing).
  for (uint64_t gate = gate_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed; (gate & kInside) != 0;) {
    gate = AwaitChange(gate_, gate);
  }
}

void CpuGemmWith(CpuGemmKernel kernel, const float* x, const float* w, const float* bias, float* y,
                 int64_t M, int64_t N, int64_t K, CpuGemmThreads* threads) {
  TPSERVE_CHECK(CpuGemmSupported(kernel), "CpuGemm: this CPU has no ", CpuGemmKernelName(kernel),
                " kernel");
  if (M <= 0 || N <= 0) return;
  GemmJob job{KernelFunction(kernel), x, w, bias, y, M, N, K, N, 1};
  int parts = 1;
  if (threads != nullptr && threads->size() > 1 && M * N * K >= kParallelWork) {
    const int64_t panels = (N + kChunkAlign - 1) / kChunkAlign;
    parts = static_cast<int>(std::min<int64_t>(threads->size(), panels));
    const int64_t most = M > 16 ? cpu_gemm_internal::kSlabPanels : 1;  // panels a chunk
    const int64_t per_chunk = std::clamp<int64_t>(panels / (int64_t{parts} * kChunksPerThread), 1, most);
    job.chunk = per_chunk * kChunkAlign;
    job.num_chunks = (N + job.chunk - 1) / job.chunk;
  }
  if (parts == 1) return RunChunks(&job);
  threads->Run(RunChunks, &job);
}

void CpuGemm(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N,
             int64_t K, CpuGemmThreads* threads) {
  CpuGemmWith(CpuGemmSelected(), x, w, bias, y, M, N, K, threads);
}

}  // namespace tpserve
