#include "cuda/emu/simt.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define TPSERVE_EMU_ASAN 1
#else
#define TPSERVE_EMU_ASAN 0
#endif

#if TPSERVE_EMU_ASAN
// A failed launch abandons its threads' stacks mid-kernel (what they own leaks
// by design), so leak checking would fail the tests that expect a failure.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif

namespace tpserve::cuda::emu {
namespace {

// Bytes of stack per emulated thread (ASan's redzones need more); the lowest
// page of each is a guard page, so an overflow faults instead of corrupting.
constexpr size_t kStackBytes = TPSERVE_EMU_ASAN ? 256 * 1024 : 64 * 1024;

enum class State { kRunnable, kBarrier, kWarpOp, kDone };

struct Fiber {
  ucontext_t context;
  char* stack = nullptr;
  uint3 tid;
  int linear = 0;  // threadIdx.x + blockDim.x · (threadIdx.y + blockDim.y · threadIdx.z)
  State state = State::kRunnable;
  std::source_location site;  // of the barrier or warp operation it waits at
  WarpOpKind kind = WarpOpKind::kSyncWarp;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
  void* fake_stack = nullptr;  // ASan's bookkeeping while switched away
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
  ucontext_t scheduler;
  const void* scheduler_stack = nullptr;  // ASan: the scheduler's stack bounds
  size_t scheduler_stack_size = 0;
  std::vector<SharedVar> shared;
  size_t shared_bytes = 0;  // static + dynamic so far
  void* dynamic = nullptr;
  std::string error;  // the first failure; ends the launch
};

thread_local Block* t_block = nullptr;
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
#if TPSERVE_EMU_ASAN
  __sanitizer_start_switch_fiber(dying ? nullptr : &f.fake_stack, b.scheduler_stack, b.scheduler_stack_size);
#endif
  swapcontext(&f.context, &b.scheduler);
#if TPSERVE_EMU_ASAN
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

void FiberMain() {
  Block& b = *t_block;
#if TPSERVE_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack, &b.scheduler_stack_size);
#endif
  (*b.body)();
  b.current->state = State::kDone;
  YieldToScheduler(b, /*dying=*/true);
  std::abort();  // never resumed
}

void Resume(Block& b, Fiber& f) {
  b.current = &f;
#if TPSERVE_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
  swapcontext(&b.scheduler, &f.context);
#if TPSERVE_EMU_ASAN
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

uint64_t LaneResult(const std::vector<Fiber*>& lanes, const Fiber& f, int lane, unsigned mask, std::string* error) {
  const int w = f.width, base = lane & ~(w - 1);
  int src = lane;
  switch (f.kind) {
    case WarpOpKind::kShflIdx: src = base + (f.arg & (w - 1)); break;
    case WarpOpKind::kShflXor: src = lane ^ f.arg; break;
    case WarpOpKind::kShflUp: src = lane - f.arg >= base ? lane - f.arg : lane; break;
    case WarpOpKind::kShflDown: src = lane + f.arg < base + w ? lane + f.arg : lane; break;
    case WarpOpKind::kSyncWarp: return 0;
    case WarpOpKind::kBallot:
    case WarpOpKind::kAny:
    case WarpOpKind::kAll: {
      uint64_t ballot = 0;
      for (int l = 0; l < kWarpSize; ++l) {
        if ((mask >> l & 1u) && lanes[l]->value) ballot |= uint64_t{1} << l;
      }
      if (f.kind == WarpOpKind::kBallot) return ballot;
      if (f.kind == WarpOpKind::kAny) return ballot != 0;
      return ballot == mask;
    }
  }
  if (src < 0 || src >= kWarpSize || !(mask >> src & 1u)) {
    *error = std::string(OpName(f.kind)) + " at " + Where(f.site) + ": lane " + std::to_string(lane) +
             " reads lane " + std::to_string(src) + ", which the mask leaves out (its value is undefined)";
    return 0;
  }
  return lanes[src]->value;
}

// Checks warp w's lanes at a warp operation against their mask and completes
// the exchange. False when no lane waits; sets b.error when the lanes that
// arrived are not the lanes the mask names (the warp would hang on a GPU).
bool ResolveWarp(Block& b, int w) {
  const int n = static_cast<int>(b.fibers.size());
  std::vector<Fiber*> lanes(kWarpSize, nullptr);
  const Fiber* first = nullptr;
  for (int l = 0; l < kWarpSize && w * kWarpSize + l < n; ++l) {
    lanes[l] = &b.fibers[w * kWarpSize + l];
    if (lanes[l]->state == State::kWarpOp && first == nullptr) first = lanes[l];
  }
  if (first == nullptr) return false;
  const unsigned mask = first->mask;
  std::ostringstream err;
  err << "warp " << w << ": " << OpName(first->kind) << " at " << Where(first->site) << " with mask 0x" << std::hex
      << mask << std::dec << ": ";
  for (int l = 0; l < kWarpSize; ++l) {
    const bool named = mask >> l & 1u;
    if (lanes[l] == nullptr) {
      if (named) {
        b.error = err.str() + "the mask names lane " + std::to_string(l) + ", which does not exist (blockDim too small)";
        return true;
      }
      continue;
    }
    const Fiber& f = *lanes[l];
    const bool here = f.state == State::kWarpOp && f.kind == first->kind && f.mask == mask &&
                      f.site.line() == first->site.line() && std::strcmp(f.site.file_name(), first->site.file_name()) == 0;
    // Lanes outside the mask may wait at another operation of their own
    // (divergent halves of a warp): their group is resolved on its own.
    if (named && !here) {
      b.error = err.str() + "lane " + std::to_string(l) + " " + Describe(f);
      return true;
    }
  }
  std::vector<uint64_t> results(kWarpSize);
  for (int l = 0; l < kWarpSize; ++l) {
    if (!(mask >> l & 1u)) continue;
    std::string e;
    results[l] = LaneResult(lanes, *lanes[l], l, mask, &e);
    if (!e.empty()) {
      b.error = "warp " + std::to_string(w) + ": " + e;
      return true;
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
    if (f.site.line() != waiting->site.line() || std::strcmp(f.site.file_name(), waiting->site.file_name()) != 0) {
      b.error = "threads of the block wait at different __syncthreads: thread " + Tid(waiting->tid) + " at " +
                Where(waiting->site) + ", thread " + Tid(f.tid) + " at " + Where(f.site);
      return;
    }
  }
  for (Fiber& f : b.fibers) f.state = State::kRunnable;
}

// Runs the block's threads until all have exited or one failed.
void Schedule(Block& b) {
  const int warps = static_cast<int>((b.fibers.size() + kWarpSize - 1) / kWarpSize);
  for (;;) {
    bool live = false;
    for (Fiber& f : b.fibers) {
      if (f.state == State::kRunnable) Resume(b, f);
      if (!b.error.empty()) return;
      live |= f.state != State::kDone;
    }
    if (!live) return;
    bool moved = false;
    for (int w = 0; w < warps; ++w) moved |= ResolveWarp(b, w);
    if (!b.error.empty() || moved) continue;
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

// Out of line: getcontext returns twice as far as the compiler knows, so the
// caller's loop variables stay out of its frame.
[[gnu::noinline]] void InitFiber(Fiber& f, uint3 tid, int linear) {
  f = Fiber{};
  f.tid = tid;
  f.linear = linear;
  f.stack = t_stacks.Stack(static_cast<size_t>(linear));
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, FiberMain, 0);
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
  for (SharedVar& v : b.shared) std::free(v.data);
  std::free(b.dynamic);
}

}  // namespace

cudaError_t RunLaunch(const LaunchConfig& config, const std::function<void()>& thread_body) {
  if (t_block != nullptr) {
    std::fprintf(stderr, "cuda emu: a launch from inside a kernel (dynamic parallelism) is not emulated\n");
    std::abort();
  }
  if (std::string e = CheckConfig(config); !e.empty()) {
    t_report = std::string(config.kernel) + ": " + e;
    return cudaErrorInvalidConfiguration;
  }
  Block b;
  b.config = &config;
  b.body = &thread_body;
  b.fibers.resize(size_t{config.block.x} * config.block.y * config.block.z);
  t_block = &b;
  for (unsigned z = 0; z < config.grid.z && b.error.empty(); ++z) {
    for (unsigned y = 0; y < config.grid.y && b.error.empty(); ++y) {
      for (unsigned x = 0; x < config.grid.x && b.error.empty(); ++x) RunBlock(b, uint3{x, y, z});
    }
  }
  t_block = nullptr;
  if (b.error.empty()) return cudaSuccess;
  t_report = std::string(config.kernel) + ", block " + Tid(b.block_idx) + ": " + b.error;
  std::fprintf(stderr, "cuda emu: %s\n", t_report.c_str());
  return cudaErrorLaunchFailure;
}

const std::string& LastReport() { return t_report; }

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

}  // namespace tpserve::cuda::emu
