// A wake-up signal between processes that share memory: a futex word and a
// count of announced waiters, on one cache line of a shared-memory segment.
//
// The party that makes a condition true (publishes a ring position with a
// release store) calls NotifyEvent, which costs a fence and one load, and a
// FUTEX_WAKE syscall only when a waiter has announced itself. A waiter spins
// for a while, then announces itself (waiters + 1), re-checks the condition and
// sleeps in FUTEX_WAIT on `epoch` (no FUTEX_PRIVATE_FLAG: the word is shared
// between processes). The two sides form a Dekker pair (store position, fence,
// load waiters | add waiter, fence, load position), so a wake-up is never lost
// between the check and the sleep; each sleep is still bounded by kMaxBlock, so
// a stop condition (a local Close, a peer's closed flag) is seen within that
// bound even when nobody wakes the waiter.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tpserve {

struct alignas(64) ShmEvent {
  uint32_t epoch = 0;    // the futex word; bumped by each wake-up
  uint32_t waiters = 0;  // threads (of any process) sleeping, or about to sleep, on epoch
};
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);

// The longest one FUTEX_WAIT lasts before the waiter looks at its stop
// condition again.
inline constexpr absl::Duration kMaxBlock = absl::Milliseconds(50);

// Waits until `ready()` is true: first polls it for `spin_ns` nanoseconds (0:
// not at all) between CPU pause instructions, yielding the CPU (sched_yield)
// every 16 polls so a peer waiting for a core gets it, then sleeps on the
// futex in slices of at most kMaxBlock. Before each sleep it calls `stop()`;
// when that is not OK the wait ends with it, unless ready() has become true
// meanwhile (then OK: data published before a peer closed is still
// delivered). ready() must load what the notifier stored with acquire order.
absl::Status AwaitEvent(ShmEvent& event, int64_t spin_ns, absl::FunctionRef<bool()> ready,
                        absl::FunctionRef<absl::Status()> stop);

// Call after the release store that can make a waiter's ready() true: wakes the
// event's sleepers; no syscall unless one announced itself.
void NotifyEvent(ShmEvent& event);

// Wakes every sleeper of the event unconditionally (used by Close, so a waiter
// re-checks its stop condition at once instead of after kMaxBlock).
void WakeAll(ShmEvent& event);

}  // namespace tpserve
