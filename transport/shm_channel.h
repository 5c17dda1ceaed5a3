// A command channel in POSIX shared memory between one writer (the
// coordinator) and N readers (its workers on the same host): every command is
// broadcast to all readers, in order, and each reader answers on a ring of its
// own. It moves bytes only (no gRPC, no protobuf): the caller frames its
// protocol messages into them.
//
// Segment "/dev/shm/tpserve-<32 random hex digits>" (shm_open O_EXCL, mode
// 0600): (1 + N) × ring_bytes of data after 512 + 576 × N bytes of control
// (rounded up to a page), every hot word on a cache line of its own:
//
//   SegmentHeader          magic "tpSHMch1", version, N, ring_bytes, spin, the
//                          hub's closed flag and why (a string)
//   ReaderSlot[N]          per reader: opened, gone (it called Close) and why
//   broadcast ring         RingControl, RingTail[N], ring_bytes of data: the
//                          hub writes, every reader reads every message
//   reply ring [N]         RingControl, RingTail[1], ring_bytes of data:
//                          reader r writes, the hub reads
//
// Rings, frames and memory ordering: transport/shm_ring.h. Waiting (spin, then
// a futex in the segment with a bounded sleep): transport/shm_event.h.
//
// Lifetime: Create makes the name; it disappears at Close or destruction of
// the hub, or as soon as all N readers have opened it (whichever is first), so
// a coordinator killed after start-up leaves nothing in /dev/shm. The mapping
// lives on in every process that opened it until its object is destroyed.
// Readers start at the first message: what the hub publishes before a reader
// opens waits for it (and Publish blocks once that fills the ring).
//
// Closing: Close(why) on either side wakes that side's blocked calls at once
// with UNAVAILABLE(why) and makes later ones fail the same way. The peer sees
// it as end of stream: a reader still receives every message the hub
// completed before closing, then UNAVAILABLE naming the hub's why; the hub
// still receives the replies a reader completed before closing, and Publish
// fails as soon as any reader has closed. A peer that dies without Close (a
// SIGKILLed worker) is not detected here: calls wait for it until the caller,
// who learns of the death elsewhere (its gRPC session, the launcher), calls
// Close from another thread. Every sleep is at most 50 ms (kMaxBlock), so a
// Close is seen within that bound even if its wake-up were lost.
//
// Cost (bench/transport_bench, 2 cores, 1 writer and 2 reader processes, one
// message out and one echo back from each): p50 3.6-6.6 us for 64 B to 4 KB,
// against 56-110 us for gRPC bidirectional streams on loopback driven from the
// same thread; the copying and atomics alone take 0.2-0.7 us (a fresh
// std::string per message included), the rest is waking the peers.
//
// Threads: each ring has one thread at a time on each end (Publish on one
// thread; Receive(r) on one thread per r; an endpoint's Receive on one thread
// and its Reply on one thread, maybe another); overlapping calls on one end
// are a broken contract (TPSERVE_CHECK). Close may be called from any thread,
// any number of times.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "transport/shm_ring.h"

namespace tpserve {

struct SegmentHeader;
struct ReaderSlot;

// How long a waiting call polls (yielding the CPU between polls) before it
// sleeps on the futex, unless the hub's creator says otherwise. Measured with
// bench/transport_bench on 2 cores with the writer and 2 reader processes
// (64-byte echo, p50): futex at once 5.2-5.5 us, 20 us of yielding polls
// 3.6-4.6 us, and no gain beyond; a busy-wait without yielding made it 3x the
// spin time (68 us for 20 us), because the spinner kept its peer off the CPU.
inline constexpr absl::Duration kDefaultShmSpin = absl::Microseconds(20);

// A ring size that holds any usual command or reply whole (a step of 8k new
// tokens is ~40 KB, rank 0's reply with top-20 logprobs for 256 sequences
// ~60 KB); larger messages still pass, streamed. The segment is (1 + N) times it.
inline constexpr size_t kDefaultShmRingBytes = size_t{1} << 20;

// The segment as one process maps it; the base of ShmHub and ShmEndpoint.
class ShmMapping {
 public:
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;

  const std::string& name() const { return name_; }  // what a reader needs to Open it
  size_t ring_bytes() const;
  int num_readers() const;

 protected:
  ShmMapping(std::string name, void* base, size_t bytes);
  ~ShmMapping();  // unmaps
  RingView Broadcast() const;
  RingView Replies(int reader) const;
  SegmentHeader& header() const { return *static_cast<SegmentHeader*>(base_); }
  ReaderSlot& slot(int reader) const;
  int64_t spin_ns() const;
  void Unlink();

  // The local close: why (UNAVAILABLE) once Close ran, else OK.
  absl::Status LocalClosed() const;
  // Records why (first call only); false when already closed.
  bool MarkClosed(const absl::Status& why);

 private:
  std::string name_;
  void* base_;
  size_t bytes_;
  std::atomic<bool> unlinked_{false};
  std::atomic<bool> closed_{false};
  mutable absl::Mutex mu_;
  absl::Status why_ ABSL_GUARDED_BY(mu_);
};

// The coordinator's side.
class ShmHub : public ShmMapping {
 public:
  // A new segment for `num_readers` (1..1024) readers, each ring `ring_bytes`
  // long (a power of two, 64 bytes to 1 GiB; INVALID_ARGUMENT otherwise).
  // Waiting calls of both sides poll for `spin` (yielding the CPU between
  // polls) before they sleep on the futex; the segment carries it to the readers.
  // RESOURCE_EXHAUSTED when /dev/shm has no room (a container's default is 64
  // MiB: raise --shm-size), UNAVAILABLE or the errno's code for other failures.
  static absl::StatusOr<std::unique_ptr<ShmHub>> Create(int num_readers, size_t ring_bytes,
                                                        absl::Duration spin = kDefaultShmSpin);
  ~ShmHub();  // Close("the hub was destroyed"), then unmaps: no call may be in flight

  // Sends `message` (any size, 0 included; larger than the ring too, streamed
  // through it as the readers consume) to every reader. Blocks while the ring
  // is full. UNAVAILABLE after Close, or when a reader has closed its end
  // (naming it and its why); then nothing more can be published.
  absl::Status Publish(std::string_view message);

  // Reader `reader`'s next reply, in order; blocks until it has arrived
  // whole. UNAVAILABLE after Close, or when the reader closed its end and sent
  // nothing more. `reader` must be in [0, num_readers) (TPSERVE_CHECK).
  absl::StatusOr<std::string> Receive(int reader);

  // Wakes every blocked call of this side with UNAVAILABLE(why's message),
  // marks the segment closed for the readers (they get why after the last
  // message) and unlinks its name. Thread-safe, idempotent (the first why
  // wins).
  void Close(const absl::Status& why);

 private:
  ShmHub(std::string name, void* base, size_t bytes);
  absl::Status PublishStop() const;
  absl::Status ReceiveStop(int reader) const;

  RingWriter broadcast_;
  std::vector<RingReader> replies_;  // [num_readers]
  std::atomic<bool> publishing_{false};
  std::unique_ptr<std::atomic<bool>[]> receiving_;  // [num_readers]
};

// A worker's side: reader `reader` of the hub named `name`.
class ShmEndpoint : public ShmMapping {
 public:
  // Maps the hub's segment as reader `reader`. NOT_FOUND when no such segment
  // exists (the hub closed, every reader already opened it, or it is on
  // another host: use the gRPC session there); INVALID_ARGUMENT when
  // the name is malformed, the segment is not a tpserve channel of this
  // version, or `reader` is out of range; ALREADY_EXISTS when that reader
  // already opened it.
  static absl::StatusOr<std::unique_ptr<ShmEndpoint>> Open(const std::string& name, int reader);
  ~ShmEndpoint();  // Close("the reader was destroyed"), then unmaps: no call may be in flight

  // The next broadcast message, whole. UNAVAILABLE after Close here, or once
  // the hub closed and every message it completed before was received.
  absl::StatusOr<std::string> Receive();

  // Sends one reply (any size) to the hub. UNAVAILABLE after Close here or
  // once the hub closed.
  absl::Status Reply(std::string_view message);

  // Wakes this side's blocked calls with UNAVAILABLE(why's message) and tells
  // the hub this reader is gone (its Publish fails from then on). Thread-safe,
  // idempotent.
  void Close(const absl::Status& why);

  int reader() const { return reader_; }

 private:
  ShmEndpoint(std::string name, void* base, size_t bytes, int reader);
  absl::Status PeerStop() const;

  int reader_;
  RingReader broadcast_;
  RingWriter reply_;
  std::atomic<bool> receiving_{false};
  std::atomic<bool> replying_{false};
};

}  // namespace tpserve
