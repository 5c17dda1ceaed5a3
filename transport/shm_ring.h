// A byte ring in shared memory with one producer and N consumers, every
// consumer reading every byte (N = 1 is a plain single-producer,
// single-consumer queue). It carries framed messages of any size: a message
// larger than the ring streams through it as the consumers make room.
//
// Positions are byte counts since the ring was made (uint64, never wrap in
// practice); byte p lives at data[p % capacity]. The producer may write up to
// `capacity` bytes beyond the slowest consumer, never more, so unread data is
// never overwritten: a slow consumer makes the producer wait.
//
//   write_pos  producer: stores with release after the bytes are in place;
//              consumers: load with acquire before they read the bytes.
//   read_pos   each consumer: stores with release after it copied the bytes
//              out; producer: loads with acquire before it reuses them.
//
// Frame (8-byte aligned, may wrap around the end of the data area):
//   FrameHeader{length, seq}   16 bytes
//   payload                    length bytes
//   zero padding               to the next multiple of 8
// `seq` counts the ring's messages from 0; a consumer checks it, so a
// misframed ring (a bug) stops the process instead of delivering garbage.
//
// Each side keeps its position in a local copy and publishes it once per
// message, or before it waits (so the other side can progress while it
// sleeps): the fast path of a small message is one memcpy, one release store,
// a fence and one load, no syscall.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "transport/shm_event.h"

namespace tpserve {

struct alignas(64) RingControl {
  uint64_t write_pos = 0;  // bytes published by the producer
  alignas(64) ShmEvent data;   // consumers sleep here waiting for write_pos to move
  alignas(64) ShmEvent space;  // the producer sleeps here waiting for a read_pos to move
};

struct alignas(64) RingTail {
  uint64_t read_pos = 0;  // bytes this consumer has copied out
};

struct FrameHeader {
  uint64_t length;  // payload bytes
  uint64_t seq;     // message number in this ring, from 0
};
static_assert(sizeof(FrameHeader) == 16);

inline constexpr uint64_t kFrameAlign = 8;

// Where one ring lives in a mapped segment (all pointers into the mapping).
struct RingView {
  RingControl* control = nullptr;
  RingTail* tails = nullptr;  // [num_tails]
  int num_tails = 0;
  std::byte* data = nullptr;  // [capacity]
  uint64_t capacity = 0;      // a power of two, at least 64
};

// Polled while a side waits: OK to keep waiting, else the status to return.
using StopFn = absl::FunctionRef<absl::Status()>;

// The producer's side. One thread at a time.
class RingWriter {
 public:
  RingWriter(RingView ring, int64_t spin_ns);

  // Appends one frame and publishes it. Blocks (spin, then futex) while the
  // ring is full. When `stop` ends a wait the frame may be half written: the
  // ring is then unusable, which is fine because stop means the channel died.
  absl::Status Write(std::string_view message, StopFn stop);

 private:
  absl::Status Put(const std::byte* src, uint64_t n, StopFn stop);
  uint64_t MinReadPos() const;
  void Publish();

  RingView ring_;
  int64_t spin_ns_;
  uint64_t pos_;       // local write position (published at the end of a message)
  uint64_t min_read_;  // the slowest consumer's read_pos when last looked at
  uint64_t seq_ = 0;
};

// One consumer's side. One thread at a time.
class RingReader {
 public:
  RingReader(RingView ring, int tail, int64_t spin_ns);

  // The next message, into `out` (replaced; its capacity is reused). Blocks
  // (spin, then futex) until the whole message has arrived; `stop` as above.
  absl::Status Read(std::string& out, StopFn stop);

 private:
  absl::Status Get(std::byte* dst, uint64_t n, StopFn stop);
  void Release();

  RingView ring_;
  RingTail* tail_;
  int64_t spin_ns_;
  uint64_t pos_;        // local read position (published at the end of a message)
  uint64_t write_pos_;  // the producer's write_pos when last looked at
  uint64_t seq_ = 0;
};

}  // namespace tpserve
