// GEMM for the CPU backend: y = x · wᵀ (+ bias), all fp32, row-major, contiguous.
//
// The weight layout is the checkpoint's [out_features, in_features], so both x
// and w are read along K, and every output element is a dot product of one x
// row and one w row.
//
// Batch-invariant, always: row m of y is bitwise the same whatever M is,
// where the row sits in x, and how many threads share the work, because every
// element is computed in this one order (docs/architecture.md, "The CPU
// backend's numerics"):
//
//   s = bias[n], or 0 without a bias
//   for each K block [k0, k0 + kc), k0 = 0, B, 2B, ... (B = kCpuGemmBlockK, the last block shorter):
//     a = 0
//     for k = k0 .. k0 + kc - 1, in order: a = fma(x[m, k], w[n, k], a)   (one rounding)
//     s = s + a
//   y[m, n] = s
//
// The order names one row of x, one row of w and nothing else, so it holds
// for one row or many (decode or prefill: no GEMV/GEMM switch), for any split
// of the columns among threads, and for every kernel below: the AVX-512, AVX2
// and portable kernels give the same bits, on any CPU. That makes a
// sequence's logits independent of the batch it shares, of how its prefill
// was chunked and of a preemption. (OpenBLAS, used before, is not
// batch-invariant: sgemv for one row and sgemm for several, with blockings
// chosen per shape, round the same row differently.) The blocks keep the
// rounding error of a long K to that of B terms plus K / B block sums.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace tpserve {

// The K block B of the order above.
inline constexpr int64_t kCpuGemmBlockK = 256;

// The kernels: one loop nest (backend/cpu_gemm_kernel.h) over each vector
// ISA, every one computing exactly the order above.
enum class CpuGemmKernel {
  kPortable,  // std::fma on GCC/Clang vectors of 4 (any CPU; slow where fma is not an instruction)
  kAvx2,      // x86-64 with AVX2 and FMA
  kAvx512,    // x86-64 with AVX-512F
};

const char* CpuGemmKernelName(CpuGemmKernel kernel);
bool CpuGemmSupported(CpuGemmKernel kernel);
// The widest kernel this CPU supports: what CpuGemm runs, in every process.
CpuGemmKernel CpuGemmSelected();

// Worker threads for the GEMM, owned by one CpuBackend (not process-wide: two
// backends in one process, as tensor-parallel tests run them, do not share a
// pool). Between calls a worker spins for 50 µs, then sleeps until the next.
// Run is called by one thread at a time.
class CpuGemmThreads {
 public:
  // num_threads - 1 workers (the caller is the first thread); at least 1.
  explicit CpuGemmThreads(int num_threads);
  ~CpuGemmThreads();
  CpuGemmThreads(const CpuGemmThreads&) = delete;
  CpuGemmThreads& operator=(const CpuGemmThreads&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls task(ctx) on the calling thread and on each worker that wakes before
  // that call returns; returns when every call has. The task must take its
  // work from a queue it shares until the queue is empty: a worker the OS did
  // not schedule in time is left out, not waited for (on a loaded machine
  // that wait cost whole time slices per GEMM).
  void Run(void (*task)(void* ctx), void* ctx);

 private:
  void Work();

  // gate_: the job's generation (high 32 bits), kClosed (no worker joins any
  // more), and the number of workers inside the task (low bits).
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kInside = kClosed - 1;

  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};  // bumped by Run (release): a new task
  std::atomic<uint64_t> gate_{0};
  std::atomic<bool> stop_{false};
  void (*task_)(void*) = nullptr;  // written before generation_ is bumped
  void* ctx_ = nullptr;
};

// y[M, N] = x[M, K] · w[N, K]ᵀ + bias[N] (bias may be nullptr) with the
// selected kernel, on `threads` (nullptr: the calling thread alone). y must
// not alias x or w.
void CpuGemm(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N,
             int64_t K, CpuGemmThreads* threads = nullptr);

// The same with a given kernel (tests; `kernel` must be supported).
void CpuGemmWith(CpuGemmKernel kernel, const float* x, const float* w, const float* bias, float* y,
                 int64_t M, int64_t N, int64_t K, CpuGemmThreads* threads = nullptr);

}  // namespace tpserve
