#include "transport/shm_ring.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/check.h"

namespace tpserve {
namespace {

std::atomic_ref<uint64_t> Ref(uint64_t& word) { return std::atomic_ref<uint64_t>(word); }

uint64_t Padding(uint64_t length) { return (kFrameAlign - length % kFrameAlign) % kFrameAlign; }

// Copies n <= capacity bytes into the ring at position pos, wrapping around.
void CopyIn(const RingView& ring, uint64_t pos, const std::byte* src, uint64_t n) {
  const uint64_t offset = pos & (ring.capacity - 1);
  const uint64_t first = std::min(n, ring.capacity - offset);
  std::memcpy(ring.data + offset, src, first);
  if (n > first) std::memcpy(ring.data, src + first, n - first);
}

void CopyOut(const RingView& ring, uint64_t pos, std::byte* dst, uint64_t n) {
  const uint64_t offset = pos & (ring.capacity - 1);
  const uint64_t first = std::min(n, ring.capacity - offset);
  std::memcpy(dst, ring.data + offset, first);
  if (n > first) std::memcpy(dst + first, ring.data, n - first);
}

}  // namespace

RingWriter::RingWriter(RingView ring, int64_t spin_ns)
    : ring_(ring),
      spin_ns_(spin_ns),
      pos_(Ref(ring.control->write_pos).load(std::memory_order_acquire)),
      min_read_(MinReadPos()) {}

uint64_t RingWriter::MinReadPos() const {
  uint64_t least = pos_;
  for (int i = 0; i < ring_.num_tails; ++i) {
    least = std::min(least, Ref(ring_.tails[i].read_pos).load(std::memory_order_acquire));
  }
  return least;
}

void RingWriter::Publish() {
  Ref(ring_.control->write_pos).store(pos_, std::memory_order_release);
  NotifyEvent(ring_.control->data);
}

absl::Status RingWriter::Put(const std::byte* src, uint64_t n, StopFn stop) {
  while (n > 0) {
    uint64_t free = ring_.capacity - (pos_ - min_read_);
    if (free < n) {
      min_read_ = MinReadPos();
      free = ring_.capacity - (pos_ - min_read_);
    }
    if (free == 0) {
      Publish();  // let the consumers take what is written so far
      auto has_room = [this] {
        min_read_ = MinReadPos();
        return pos_ - min_read_ < ring_.capacity;
      };
      if (absl::Status s = AwaitEvent(ring_.control->space, spin_ns_, has_room, stop); !s.ok()) return s;
      continue;
    }
    const uint64_t k = std::min(n, free);
    CopyIn(ring_, pos_, src, k);
    pos_ += k;
    src += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::Status RingWriter::Write(std::string_view message, StopFn stop) {
  static constexpr std::byte kZeros[kFrameAlign] = {};
  const FrameHeader header{message.size(), seq_++};
  if (absl::Status s = Put(reinterpret_cast<const std::byte*>(&header), sizeof(header), stop); !s.ok()) return s;
  if (absl::Status s = Put(reinterpret_cast<const std::byte*>(message.data()), message.size(), stop); !s.ok()) {
    return s;
  }
  if (absl::Status s = Put(kZeros, Padding(message.size()), stop); !s.ok()) return s;
  Publish();
  return absl::OkStatus();
}

RingReader::RingReader(RingView ring, int tail, int64_t spin_ns)
    : ring_(ring),
      tail_(&ring.tails[tail]),
      spin_ns_(spin_ns),
      pos_(Ref(tail_->read_pos).load(std::memory_order_acquire)),
      write_pos_(Ref(ring.control->write_pos).load(std::memory_order_acquire)) {}

void RingReader::Release() {
  Ref(tail_->read_pos).store(pos_, std::memory_order_release);
  NotifyEvent(ring_.control->space);
}

absl::Status RingReader::Get(std::byte* dst, uint64_t n, StopFn stop) {
  while (n > 0) {
    uint64_t available = write_pos_ - pos_;
    if (available < n) {
      write_pos_ = Ref(ring_.control->write_pos).load(std::memory_order_acquire);
      available = write_pos_ - pos_;
    }
    if (available == 0) {
      Release();  // let the producer reuse what was read so far
      auto has_data = [this] {
        write_pos_ = Ref(ring_.control->write_pos).load(std::memory_order_acquire);
        return write_pos_ != pos_;
      };
      if (absl::Status s = AwaitEvent(ring_.control->data, spin_ns_, has_data, stop); !s.ok()) return s;
      continue;
    }
    const uint64_t k = std::min(n, available);
    CopyOut(ring_, pos_, dst, k);
    pos_ += k;
    dst += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::Status RingReader::Read(std::string& out, StopFn stop) {
  FrameHeader header;
  if (absl::Status s = Get(reinterpret_cast<std::byte*>(&header), sizeof(header), stop); !s.ok()) return s;
  TPSERVE_CHECK(header.seq == seq_, "shared-memory ring misframed: message ", header.seq, " where ", seq_,
                " was expected (length field ", header.length, ")");
  ++seq_;
  out.resize(header.length);
  if (absl::Status s = Get(reinterpret_cast<std::byte*>(out.data()), header.length, stop); !s.ok()) return s;
  std::byte padding[kFrameAlign];
  if (absl::Status s = Get(padding, Padding(header.length), stop); !s.ok()) return s;
  Release();
  return absl::OkStatus();
}

}  // namespace tpserve
