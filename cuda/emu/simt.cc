#include "cuda/emu/simt.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "base/sanitizers.h"
#if TPSERVE_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if TPSERVE_ASAN
// A failed launch abandons its threads' stacks mid-kernel (what they own leaks
// by design), so leak checking would fail the tests that expect a failure.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif

// The fiber switch: saves the callee-saved registers and the FP control words
// on the current stack, stores its pointer in *save and continues on `next`.
// glibc's swapcontext would also save the signal mask with a system call per
// switch, which made it the runner's main cost.
#if !defined(__x86_64__)
#error "cuda/emu/simt.cc: the fiber switch is written for x86-64 (cuda/CMakeLists.txt skips cuda-emu elsewhere)"
#endif
extern "C" void tpserve_emu_switch(void** save, void* next);
asm(R"(
  .text
  .globl tpserve_emu_switch
  .type tpserve_emu_switch, @function
tpserve_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tpserve_emu_switch, .-tpserve_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace tpserve::cuda::emu {
namespace {

// Bytes of stack per emulated thread (ASan's redzones need more); the lowest
// page of each is a guard page, so an overflow faults instead of corrupting.
constexpr size_t kStackBytes = TPSERVE_ASAN ? 256 * 1024 : 64 * 1024;

enum class State { kRunnable, kBarrier, kWarpOp, kDone };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while switched away
  char* stack = nullptr;
  uint3 tid;
  int linear = 0;  // threadIdx.x + blockDim.x · (threadIdx.y + blockDim.y · threadIdx.z)
  State state = State::kRunnable;
  std::source_location site;  // of the barrier or warp operation it waits at
  WarpOpKind kind = WarpOpKind::kSyncWarp;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
  const void* collective_in = nullptr;  // kCollective: this lane's buffers and the function
  void* collective_out = nullptr;
  WarpCollectiveFn collective_fn = nullptr;
  void* fake_stack = nullptr;  // ASan's bookkeeping while switched away
  bool waited_for_grid = false;  // called GridDependencyWait (checked for programmatic launches)
};

struct SharedVar {
  const void* tag;
  void* data;
};

// The thread stacks of this host thread, reused across launches.
struct StackPool {
  char* base = nullptr;
  size_t count = 0;
  ~StackPool() {
    if (base) munmap(base, count * kStackBytes);
  }
  char* Stack(size_t i) {
    if (i >= count) Grow(i + 1);
    return base + i * kStackBytes;
  }
  void Grow(size_t n) {
    n = n < kMaxThreadsPerBlock ? kMaxThreadsPerBlock : n;
    if (base) munmap(base, count * kStackBytes);
    void* p = mmap(nullptr, n * kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      std::perror("cuda emu: mmap of the fiber stacks");
      std::abort();
    }
    base = static_cast<char*>(p);
    count = n;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    for (size_t i = 0; i < n; ++i) mprotect(base + i * kStackBytes, page, PROT_NONE);
  }
};

struct Block {
  const LaunchConfig* config = nullptr;
  const std::function<void()>* body = nullptr;
  uint3 block_idx{};
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  void* scheduler_sp = nullptr;
  const void* scheduler_stack = nullptr;  // ASan: the scheduler's stack bounds
  size_t scheduler_stack_size = 0;
  std::vector<SharedVar> shared;
  size_t shared_bytes = 0;  // static + dynamic so far
  void* dynamic = nullptr;
  std::string error;  // the first failure; ends the launch
};

thread_local Block* t_block = nullptr;
std::atomic<int64_t> g_programmatic_launches{0};
thread_local StackPool t_stacks;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local std::string t_report;

std::string Where(const std::source_location& s) {
  std::ostringstream os;
  os << s.file_name() << ":" << s.line();
  return os.str();
}

std::string Tid(const uint3& t) {
  std::ostringstream os;
  os << "(" << t.x << "," << t.y << "," << t.z << ")";
  return os.str();
}

const char* OpName(WarpOpKind k) {
  switch (k) {
    case WarpOpKind::kShflIdx: return "__shfl_sync";
    case WarpOpKind::kShflXor: return "__shfl_xor_sync";
    case WarpOpKind::kShflUp: return "__shfl_up_sync";
    case WarpOpKind::kShflDown: return "__shfl_down_sync";
    case WarpOpKind::kSyncWarp: return "__syncwarp";
    case WarpOpKind::kBallot: return "__ballot_sync";
    case WarpOpKind::kAny: return "__any_sync";
    case WarpOpKind::kAll: return "__all_sync";
    case WarpOpKind::kCollective: return "a warp-collective instruction (mma)";
  }
  return "?";
}

Block& CurrentBlock() {
  if (t_block == nullptr || t_block->current == nullptr) {
    std::fprintf(stderr, "cuda emu: a CUDA builtin was called outside a kernel launch\n");
    std::abort();
  }
  return *t_block;
}

// Switches from the running fiber back to the scheduler.
void YieldToScheduler(Block& b, bool dying = false) {
  Fiber& f = *b.current;
#if TPSERVE_ASAN
  __sanitizer_start_switch_fiber(dying ? nullptr : &f.fake_stack, b.scheduler_stack, b.scheduler_stack_size);
#endif
  tpserve_emu_switch(&f.sp, b.scheduler_sp);
#if TPSERVE_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
  (void)dying;
}

// Records the first failure of the block (with the failing thread) and stops this thread.
[[noreturn]] void Fail(Block& b, const std::string& what) {
  if (b.error.empty()) b.error = what;
  b.current->state = State::kDone;
  YieldToScheduler(b, /*dying=*/true);
  std::abort();  // never resumed
}

// A thread of a programmatic launch must have waited for the previous grid.
// Not inlined: FiberMain never returns, so ASan's redzones of a local there
// would stay on the reused stack.
[[gnu::noinline]] void CheckWaitedForGrid(Block& b) {
  if (!b.config->programmatic || b.current->waited_for_grid) return;
  Fail(b, "a programmatic (PDL) launch's thread exited without TPSERVE_GRID_DEPENDENCY_WAIT(): on the GPU it "
          "may have read its inputs before the previous kernel wrote them; wait at the kernel's top");
}

void FiberMain() {
  Block& b = *t_block;
#if TPSERVE_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack, &b.scheduler_stack_size);
#endif
  (*b.body)();
  CheckWaitedForGrid(b);
  b.current->state = State::kDone;
  YieldToScheduler(b, /*dying=*/true);
  std::abort();  // never resumed
}

void Resume(Block& b, Fiber& f) {
  b.current = &f;
#if TPSERVE_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
  tpserve_emu_switch(&b.scheduler_sp, f.sp);
#if TPSERVE_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  b.current = nullptr;
}

std::string Describe(const Fiber& f) {
  switch (f.state) {
    case State::kDone: return "has exited";
    case State::kBarrier: return "waits at __syncthreads at " + Where(f.site);
    case State::kWarpOp: return std::string("waits at ") + OpName(f.kind) + " at " + Where(f.site);
    case State::kRunnable: return "is running";
  }
  return "?";
}

bool SameSite(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

// The lane `lane` of an exchange reads from; -1 for the votes and __syncwarp.
int SourceLane(const Fiber& f, int lane) {
  const int w = f.width, base = lane & ~(w - 1);
  switch (f.kind) {
    case WarpOpKind::kShflIdx: return base + (f.arg & (w - 1));
    case WarpOpKind::kShflXor: return lane ^ f.arg;
    case WarpOpKind::kShflUp: return lane - f.arg >= base ? lane - f.arg : lane;
    case WarpOpKind::kShflDown: return lane + f.arg < base + w ? lane + f.arg : lane;
    default: return -1;
  }
}

uint64_t VoteResult(Fiber* const* lanes, WarpOpKind kind, unsigned mask) {
  uint64_t ballot = 0;
  for (int l = 0; l < kWarpSize; ++l) {
    if ((mask >> l & 1u) && lanes[l]->value) ballot |= uint64_t{1} << l;
  }
  if (kind == WarpOpKind::kBallot) return ballot;
  if (kind == WarpOpKind::kAny) return ballot != 0;
  if (kind == WarpOpKind::kAll) return ballot == mask;
  return 0;  // __syncwarp
}

void WarpError(Block& b, int w, const Fiber& first, const std::string& detail) {
  std::ostringstream os;
  os << "warp " << w << ": " << OpName(first.kind) << " at " << Where(first.site) << " with mask 0x" << std::hex
     << first.mask << std::dec << ": " << detail;
  b.error = os.str();
}

// Checks warp w's lanes at a warp operation against their mask and completes
// the exchange. False when no lane waits; sets b.error when the lanes that
// arrived are not the lanes the mask names (the warp would hang on a GPU).
bool ResolveWarp(Block& b, int w) {
  const int n = static_cast<int>(b.fibers.size());
  Fiber* lanes[kWarpSize] = {};
  const Fiber* first = nullptr;
  for (int l = 0; l < kWarpSize && w * kWarpSize + l < n; ++l) {
    lanes[l] = &b.fibers[static_cast<size_t>(w * kWarpSize + l)];
    if (lanes[l]->state == State::kWarpOp && first == nullptr) first = lanes[l];
  }
  if (first == nullptr) return false;
  const unsigned mask = first->mask;
  for (int l = 0; l < kWarpSize; ++l) {
    if (!(mask >> l & 1u)) continue;  // lanes outside the mask may wait at an operation of their own
    if (lanes[l] == nullptr) {
      WarpError(b, w, *first, "the mask names lane " + std::to_string(l) + ", which does not exist (blockDim too small)");
      return true;
    }
    const Fiber& f = *lanes[l];
    if (f.state != State::kWarpOp || f.kind != first->kind || f.mask != mask || !SameSite(f.site, first->site)) {
      WarpError(b, w, *first, "lane " + std::to_string(l) + " " + Describe(f));
      return true;
    }
  }
  if (first->kind == WarpOpKind::kCollective) {
    if (first->collective_fn == nullptr) {
      WarpError(b, w, *first, "no function to run");
      return true;
    }
    const void* in[kWarpSize];
    void* out[kWarpSize];
    for (int l = 0; l < kWarpSize; ++l) {
      in[l] = lanes[l]->collective_in;
      out[l] = lanes[l]->collective_out;
    }
    first->collective_fn(in, out);  // the lanes' buffers live on their suspended stacks
    for (int l = 0; l < kWarpSize; ++l) lanes[l]->state = State::kRunnable;
    return true;
  }
  uint64_t results[kWarpSize] = {};
  for (int l = 0; l < kWarpSize; ++l) {
    if (!(mask >> l & 1u)) continue;
    const int src = SourceLane(*lanes[l], l);
    if (src < 0) {
      results[l] = VoteResult(lanes, first->kind, mask);
    } else if (src >= kWarpSize || !(mask >> src & 1u)) {
      WarpError(b, w, *first, "lane " + std::to_string(l) + " reads lane " + std::to_string(src) +
                                  ", which the mask leaves out (its value is undefined)");
      return true;
    } else {
      results[l] = lanes[src]->value;
    }
  }
  for (int l = 0; l < kWarpSize; ++l) {
    if (!(mask >> l & 1u)) continue;
    lanes[l]->result = results[l];
    lanes[l]->state = State::kRunnable;
  }
  return true;
}

// Every live thread waits at a barrier: releases them when it is the same one
// and nobody exited; otherwise sets b.error.
void ReleaseBarrier(Block& b) {
  const Fiber* waiting = nullptr;
  const Fiber* exited = nullptr;
  for (const Fiber& f : b.fibers) {
    if (f.state == State::kBarrier && waiting == nullptr) waiting = &f;
    if (f.state == State::kDone && exited == nullptr) exited = &f;
  }
  if (waiting == nullptr) return;
  if (exited != nullptr) {
    b.error = "__syncthreads at " + Where(waiting->site) + " (thread " + Tid(waiting->tid) +
              ") is not reached by every thread of the block: thread " + Tid(exited->tid) + " has exited";
    return;
  }
  for (const Fiber& f : b.fibers) {
    if (!SameSite(f.site, waiting->site)) {
      b.error = "threads of the block wait at different __syncthreads: thread " + Tid(waiting->tid) + " at " +
                Where(waiting->site) + ", thread " + Tid(f.tid) + " at " + Where(f.site);
      return;
    }
  }
  for (Fiber& f : b.fibers) f.state = State::kRunnable;
}

// Runs warp w's lanes, exchange by exchange, until each has exited or waits at
// the block barrier; false when the block failed.
bool RunWarp(Block& b, int w) {
  const size_t first = static_cast<size_t>(w) * kWarpSize;
  const size_t last = std::min(b.fibers.size(), first + kWarpSize);
  do {
    for (size_t i = first; i < last; ++i) {
      if (b.fibers[i].state == State::kRunnable) Resume(b, b.fibers[i]);
      if (!b.error.empty()) return false;
    }
  } while (ResolveWarp(b, w) && b.error.empty());
  return b.error.empty();
}

// Runs the block's threads until all have exited or one failed. Warps run one
// at a time, each as far as it gets before the next block barrier, in the
// opposite order after every barrier: one warp runs ahead of the others, as a
// GPU may let it, so a missing barrier between one warp's shared writes and
// another's reads (in either order) shows up as poison or a stale value.
void Schedule(Block& b) {
  const int warps = static_cast<int>((b.fibers.size() + kWarpSize - 1) / kWarpSize);
  for (bool reverse = false;; reverse = !reverse) {
    for (int i = 0; i < warps; ++i) {
      if (!RunWarp(b, reverse ? warps - 1 - i : i)) return;
    }
    if (std::all_of(b.fibers.begin(), b.fibers.end(), [](const Fiber& f) { return f.state == State::kDone; })) return;
    ReleaseBarrier(b);
    if (!b.error.empty()) return;
  }
}

std::string CheckConfig(const LaunchConfig& c) {
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  std::ostringstream os;
  if (threads == 0 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0) {
    os << "an empty launch (grid " << c.grid.x << "x" << c.grid.y << "x" << c.grid.z << ", block " << c.block.x
       << "x" << c.block.y << "x" << c.block.z << "): every dimension must be at least 1";
  } else if (threads > kMaxThreadsPerBlock || c.block.x > kMaxBlockDimXY || c.block.y > kMaxBlockDimXY ||
             c.block.z > kMaxBlockDimZ) {
    os << "block " << c.block.x << "x" << c.block.y << "x" << c.block.z << " (" << threads
       << " threads) exceeds sm_80/sm_90 limits: 1024 threads, 1024x1024x64";
  } else if (c.grid.x > kMaxGridDimX || c.grid.y > kMaxGridDimYZ || c.grid.z > kMaxGridDimYZ) {
    os << "grid " << c.grid.x << "x" << c.grid.y << "x" << c.grid.z << " exceeds 2^31-1 x 65535 x 65535";
  } else if (c.dynamic_shared > kMaxSharedBytesPerBlock) {
    os << c.dynamic_shared << " bytes of dynamic shared memory exceed the " << kMaxSharedBytesPerBlock
       << " a block gets without cudaFuncAttributeMaxDynamicSharedMemorySize";
  }
  return os.str();
}

// A fresh fiber's stack as tpserve_emu_switch leaves a suspended one: the
// saved control words, six callee-saved registers and FiberMain as the return
// address, with the alignment a called function expects.
void InitFiber(Fiber& f, uint3 tid, int linear) {
  f = Fiber{};
  f.tid = tid;
  f.linear = linear;
  f.stack = t_stacks.Stack(static_cast<size_t>(linear));
  auto top = reinterpret_cast<uintptr_t>(f.stack + kStackBytes) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<uint64_t*>(top);
  *--slot = 0;                                         // FiberMain's return address: never used
  *--slot = reinterpret_cast<uint64_t>(&FiberMain);    // where the first switch "returns"
  for (int r = 0; r < 6; ++r) *--slot = 0;             // rbp rbx r12 r13 r14 r15
  *--slot = uint64_t{0x1f80} | uint64_t{0x037f} << 32;  // MXCSR, x87 control word: the defaults
  f.sp = slot;
}

void RunBlock(Block& b, uint3 block_idx) {
  const LaunchConfig& c = *b.config;
  b.block_idx = block_idx;
  b.shared.clear();
  b.shared_bytes = c.dynamic_shared;
  b.dynamic = std::malloc(c.dynamic_shared);  // exactly the bytes launched: ASan sees overruns
  if (c.dynamic_shared > 0) std::memset(b.dynamic, 0xff, c.dynamic_shared);
  int i = 0;
  for (unsigned z = 0; z < c.block.z; ++z) {
    for (unsigned y = 0; y < c.block.y; ++y) {
      for (unsigned x = 0; x < c.block.x; ++x, ++i) {
        InitFiber(b.fibers[static_cast<size_t>(i)], uint3{x, y, z}, i);
      }
    }
  }
  Schedule(b);
#if TPSERVE_ASAN
  // A failed block leaves its threads' frames, and ASan's poisoned redzones in
  // them, on stacks the next launch reuses.
  if (!b.error.empty()) {
    for (const Fiber& f : b.fibers) __asan_unpoison_memory_region(f.stack, kStackBytes);
  }
#endif
  for (SharedVar& v : b.shared) std::free(v.data);
  std::free(b.dynamic);
}

// With TPSERVE_EMU_LAUNCH_LOG=<file>, appends each kernel's name the first time
// it is launched (tests/cuda_emu/kernel_coverage_test.cc reads it).
void LogLaunch(const char* kernel) {
  static const char* const path = std::getenv("TPSERVE_EMU_LAUNCH_LOG");
  if (path == nullptr) return;
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard lock(mu);
  if (!logged.insert(kernel).second) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", kernel);
    std::fclose(f);
  }
}

// TPSERVE_EMU_REVERSE_BLOCKS (simt.h, RunLaunch): run the grid's blocks last first.
bool ReverseBlocks() {
  const char* v = std::getenv("TPSERVE_EMU_REVERSE_BLOCKS");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

}  // namespace

cudaError_t RunLaunch(const LaunchConfig& config, const std::function<void()>& thread_body) {
  if (t_block != nullptr) {
    std::fprintf(stderr, "cuda emu: a launch from inside a kernel (dynamic parallelism) is not emulated\n");
    std::abort();
  }
  if (const cudaError_t err = CheckLaunchConfig(config); err != cudaSuccess) return err;
  LogLaunch(config.kernel);
  if (config.programmatic) g_programmatic_launches.fetch_add(1, std::memory_order_relaxed);
  Block b;
  b.config = &config;
  b.body = &thread_body;
  b.fibers.resize(size_t{config.block.x} * config.block.y * config.block.z);
  t_block = &b;
  const bool reverse = ReverseBlocks();
  const dim3& g = config.grid;
  for (unsigned z = 0; z < g.z && b.error.empty(); ++z) {
    for (unsigned y = 0; y < g.y && b.error.empty(); ++y) {
      for (unsigned x = 0; x < g.x && b.error.empty(); ++x) {
        RunBlock(b, reverse ? uint3{g.x - 1 - x, g.y - 1 - y, g.z - 1 - z} : uint3{x, y, z});
      }
    }
  }
  t_block = nullptr;
  if (b.error.empty()) return cudaSuccess;
  t_report = std::string(config.kernel) + ", block " + Tid(b.block_idx) + ": " + b.error;
  std::fprintf(stderr, "cuda emu: %s\n", t_report.c_str());
  return cudaErrorLaunchFailure;
}

cudaError_t CheckLaunchConfig(const LaunchConfig& config) {
  if (std::string e = CheckConfig(config); !e.empty()) {
    t_report = std::string(config.kernel) + ": " + e;
    return cudaErrorInvalidConfiguration;
  }
  return cudaSuccess;
}

const std::string& LastReport() { return t_report; }

int64_t ProgrammaticLaunches() { return g_programmatic_launches.load(std::memory_order_relaxed); }

void GridDependencyWait() { CurrentBlock().current->waited_for_grid = true; }

void SetLastError(cudaError_t err) {
  if (err != cudaSuccess) t_last_error = err;
}
cudaError_t PeekLastError() { return t_last_error; }
cudaError_t TakeLastError() {
  const cudaError_t err = t_last_error;
  t_last_error = cudaSuccess;
  return err;
}

const uint3& ThreadIdx() { return CurrentBlock().current->tid; }
const uint3& BlockIdx() { return CurrentBlock().block_idx; }
const dim3& BlockDim() { return CurrentBlock().config->block; }
const dim3& GridDim() { return CurrentBlock().config->grid; }

void SyncThreads(std::source_location site) {
  Block& b = CurrentBlock();
  b.current->state = State::kBarrier;
  b.current->site = site;
  YieldToScheduler(b);
}

uint64_t WarpOp(WarpOpKind kind, unsigned mask, uint64_t value, int arg, int width, std::source_location site) {
  Block& b = CurrentBlock();
  Fiber& f = *b.current;
  const int lane = f.linear % kWarpSize;
  if (width <= 0 || width > kWarpSize || (width & (width - 1)) != 0) {
    Fail(b, std::string(OpName(kind)) + " at " + Where(site) + ": width " + std::to_string(width) +
                " is not a power of 2 in 1..32");
  }
  if (!(mask >> lane & 1u)) {
    std::ostringstream os;
    os << OpName(kind) << " at " << Where(site) << ": thread " << Tid(f.tid) << " (lane " << lane
       << ") calls it with mask 0x" << std::hex << mask << ", which leaves the caller out";
    Fail(b, os.str());
  }
  f.state = State::kWarpOp;
  f.kind = kind;
  f.mask = mask;
  f.value = value;
  f.arg = arg;
  f.width = width;
  f.site = site;
  YieldToScheduler(b);
  return f.result;
}

void WarpCollective(const void* in, void* out, WarpCollectiveFn fn, std::source_location site) {
  Block& b = CurrentBlock();
  Fiber& f = *b.current;
  f.collective_in = in;
  f.collective_out = out;
  f.collective_fn = fn;
  // Every lane of the warp (full mask), exchanged as one operation.
  WarpOp(WarpOpKind::kCollective, 0xffffffffu, 0, 0, kWarpSize, site);
}

void* SharedVariable(const void* tag, size_t bytes, const char* name) {
  Block& b = CurrentBlock();
  for (const SharedVar& v : b.shared) {
    if (v.tag == tag) return v.data;
  }
  if (b.shared_bytes + bytes > kMaxSharedBytesPerBlock) {
    Fail(b, "shared variable '" + std::string(name) + "' (" + std::to_string(bytes) + " bytes) takes the block to " +
                std::to_string(b.shared_bytes + bytes) + " bytes of shared memory, over the " +
                std::to_string(kMaxSharedBytesPerBlock) + " a block gets without an opt-in");
  }
  void* data = std::malloc(bytes);  // exactly its size: ASan sees overruns
  std::memset(data, 0xff, bytes);   // unwritten reads are NaN
  b.shared.push_back({tag, data});
  b.shared_bytes += bytes;
  return data;
}

void* DynamicShared() { return CurrentBlock().dynamic; }

void Misaligned(const void* p, size_t alignment, const char* access) {
  std::ostringstream os;
  os << access << " at " << p << ", which is not a multiple of " << alignment
     << " bytes: the GPU faults (cudaErrorMisalignedAddress); check the pointer with Aligned16 before the "
        "vector path, or offset it by whole vectors";
  Fail(CurrentBlock(), os.str());
}

}  // namespace tpserve::cuda::emu
