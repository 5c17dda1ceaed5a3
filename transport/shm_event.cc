#include "transport/shm_event.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace tpserve {
namespace {

std::atomic_ref<uint32_t> Ref(uint32_t& word) { return std::atomic_ref<uint32_t>(word); }

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Sleeps while `*word == expected`, at most kMaxBlock. Any return (woken,
// timed out, EAGAIN because the word moved, EINTR) just means "look again".
void FutexWait(uint32_t* word, uint32_t expected) {
  const timespec timeout = absl::ToTimespec(kMaxBlock);
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void FutexWakeAll(uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

// Polls ready() until it is true or `spin_ns` have passed; true when ready.
// Between short bursts of pause instructions it yields the CPU: with more
// busy processes than cores (the coordinator and 2 workers on 2 cores) a pure
// busy-wait would keep the very peer it waits for off the CPU, and measured
// round trips grew to 3x the spin time (bench/transport_bench.cc).
bool Spin(int64_t spin_ns, absl::FunctionRef<bool()> ready) {
  if (spin_ns <= 0) return false;
  const int64_t deadline = NowNs() + spin_ns;
  while (true) {
    for (int i = 0; i < 16; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    if (NowNs() >= deadline) return ready();
    sched_yield();
  }
}

}  // namespace

absl::Status AwaitEvent(ShmEvent& event, int64_t spin_ns, absl::FunctionRef<bool()> ready,
                        absl::FunctionRef<absl::Status()> stop) {
  if (ready() || Spin(spin_ns, ready)) return absl::OkStatus();
  while (true) {
    if (absl::Status s = stop(); !s.ok()) return ready() ? absl::OkStatus() : s;
    const uint32_t epoch = Ref(event.epoch).load(std::memory_order_acquire);
    Ref(event.waiters).fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the waiter's half of the Dekker pair
    const bool now_ready = ready();
    if (!now_ready) FutexWait(&event.epoch, epoch);
    Ref(event.waiters).fetch_sub(1, std::memory_order_relaxed);
    if (now_ready || ready()) return absl::OkStatus();
  }
}

void NotifyEvent(ShmEvent& event) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the notifier's half of the Dekker pair
  if (Ref(event.waiters).load(std::memory_order_relaxed) == 0) return;
  Ref(event.epoch).fetch_add(1, std::memory_order_release);
  FutexWakeAll(&event.epoch);
}

void WakeAll(ShmEvent& event) {
  Ref(event.epoch).fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&event.epoch);
}

}  // namespace tpserve
