#include "transport/shm_channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"

namespace tpserve {

inline constexpr uint64_t kShmMagic = 0x3168634d48537074;  // "tpSHMch1" in memory order
inline constexpr uint32_t kShmVersion = 1;
inline constexpr int kMaxReaders = 1024;
inline constexpr uint64_t kMinRingBytes = 64;
inline constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;
inline constexpr size_t kWhyBytes = 192;  // a close's message, NUL-terminated, truncated to fit

struct alignas(64) SegmentHeader {
  uint64_t magic = 0;  // kShmMagic, stored last (release) once everything else is in place
  uint32_t version = 0;
  uint32_t num_readers = 0;
  uint64_t ring_bytes = 0;     // each ring's data bytes
  uint64_t segment_bytes = 0;  // the whole segment
  int64_t spin_ns = 0;         // how long waiting calls spin before they sleep
  alignas(64) uint32_t hub_closed = 0;  // 1 once the hub closed; hub_why is complete then
  uint32_t readers_gone = 0;            // readers that closed their end
  uint32_t readers_opened = 0;          // readers that opened the segment
  char hub_why[kWhyBytes] = {};
};

struct alignas(64) ReaderSlot {
  uint32_t opened = 0;  // 0 -> 1 by the reader's Open (one endpoint per reader)
  uint32_t gone = 0;    // 1 once the reader closed; why is complete then
  char why[kWhyBytes] = {};
};

namespace {

std::atomic_ref<uint32_t> Ref(uint32_t& word) { return std::atomic_ref<uint32_t>(word); }

struct ReplyRing {
  RingControl control;
  RingTail tail;
};

// Byte offsets in the segment of its parts, from (num_readers, ring_bytes).
struct Layout {
  size_t slots = 0;        // ReaderSlot[num_readers]
  size_t broadcast = 0;    // RingControl, then RingTail[num_readers]
  size_t replies = 0;      // ReplyRing[num_readers]
  size_t data = 0;         // broadcast data, then each reply ring's data (page aligned)
  size_t total = 0;
};

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

Layout ComputeLayout(uint64_t num_readers, uint64_t ring_bytes) {
  Layout l;
  l.slots = RoundUp(sizeof(SegmentHeader), 64);
  l.broadcast = l.slots + num_readers * sizeof(ReaderSlot);
  l.replies = l.broadcast + sizeof(RingControl) + num_readers * sizeof(RingTail);
  l.data = RoundUp(l.replies + num_readers * sizeof(ReplyRing), 4096);
  l.total = l.data + (1 + num_readers) * ring_bytes;
  return l;
}

bool IsPowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

void CopyWhy(char (&to)[kWhyBytes], absl::string_view why) {
  const size_t n = std::min(why.size(), kWhyBytes - 1);
  std::memcpy(to, why.data(), n);
  to[n] = '\0';
}

std::string ReadWhy(const char (&from)[kWhyBytes]) { return std::string(from, strnlen(from, kWhyBytes)); }

absl::StatusOr<std::string> RandomName() {
  unsigned char bytes[16];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return absl::ErrnoToStatus(errno, "getrandom for a shared-memory name");
  }
  std::string name = "/tpserve-";
  for (unsigned char b : bytes) absl::StrAppend(&name, absl::Hex(b, absl::kZeroPad2));
  return name;
}

// Marks one end of a ring busy for the length of a call.
class OneCaller {
 public:
  OneCaller(std::atomic<bool>& busy, const char* call) : busy_(busy) {
    TPSERVE_CHECK(!busy_.exchange(true, std::memory_order_acquire), call,
                  " called from two threads at once; each end of a ring takes one thread at a time");
  }
  ~OneCaller() { busy_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool>& busy_;
};

}  // namespace

// ---- ShmMapping ----

ShmMapping::ShmMapping(std::string name, void* base, size_t bytes)
    : name_(std::move(name)), base_(base), bytes_(bytes) {}

ShmMapping::~ShmMapping() { munmap(base_, bytes_); }

size_t ShmMapping::ring_bytes() const { return header().ring_bytes; }
int ShmMapping::num_readers() const { return static_cast<int>(header().num_readers); }
int64_t ShmMapping::spin_ns() const { return header().spin_ns; }

ReaderSlot& ShmMapping::slot(int reader) const {
  const Layout l = ComputeLayout(header().num_readers, header().ring_bytes);
  return reinterpret_cast<ReaderSlot*>(static_cast<std::byte*>(base_) + l.slots)[reader];
}

RingView ShmMapping::Broadcast() const {
  const Layout l = ComputeLayout(header().num_readers, header().ring_bytes);
  std::byte* base = static_cast<std::byte*>(base_);
  RingView ring;
  ring.control = reinterpret_cast<RingControl*>(base + l.broadcast);
  ring.tails = reinterpret_cast<RingTail*>(base + l.broadcast + sizeof(RingControl));
  ring.num_tails = num_readers();
  ring.data = base + l.data;
  ring.capacity = header().ring_bytes;
  return ring;
}

RingView ShmMapping::Replies(int reader) const {
  const Layout l = ComputeLayout(header().num_readers, header().ring_bytes);
  std::byte* base = static_cast<std::byte*>(base_);
  ReplyRing& reply = reinterpret_cast<ReplyRing*>(base + l.replies)[reader];
  RingView ring;
  ring.control = &reply.control;
  ring.tails = &reply.tail;
  ring.num_tails = 1;
  ring.capacity = header().ring_bytes;
  ring.data = base + l.data + (1 + static_cast<size_t>(reader)) * ring.capacity;
  return ring;
}

void ShmMapping::Unlink() {
  if (!unlinked_.exchange(true)) shm_unlink(name_.c_str());  // ENOENT: a reader already did
}

absl::Status ShmMapping::LocalClosed() const {
  if (!closed_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return why_;
}

bool ShmMapping::MarkClosed(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (closed_.load(std::memory_order_relaxed)) return false;
  why_ = absl::UnavailableError(why.message().empty() ? absl::StrCat("shared-memory channel ", name_, " closed")
                                                      : std::string(why.message()));
  closed_.store(true, std::memory_order_release);
  return true;
}

// ---- ShmHub ----

namespace {

absl::Status CheckHubArguments(int num_readers, size_t ring_bytes) {
  if (num_readers < 1 || num_readers > kMaxReaders) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShmHub: num_readers is ", num_readers, "; give 1 to ", kMaxReaders));
  }
  if (!IsPowerOfTwo(ring_bytes) || ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes) {
    return absl::InvalidArgumentError(absl::StrCat("ShmHub: ring_bytes is ", ring_bytes,
                                                   "; give a power of two from ", kMinRingBytes, " to ",
                                                   kMaxRingBytes));
  }
  return absl::OkStatus();
}

// Creates, sizes and maps a new segment; the mapping's address.
absl::StatusOr<void*> CreateSegment(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("shm_open(", name, ") for a new shared-memory channel; is "
                                                   "/dev/shm mounted and writable?"));
  }
  // posix_fallocate, not ftruncate: a /dev/shm too small fails here, not with SIGBUS later.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    if (err == ENOSPC) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no room for a ", bytes, "-byte shared-memory channel in /dev/shm; free some, give the container "
          "more (docker --shm-size), or use a smaller ring"));
    }
    return absl::ErrnoToStatus(err, absl::StrCat("posix_fallocate of ", bytes, " bytes for ", name));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return absl::ErrnoToStatus(mmap_errno, absl::StrCat("mmap of shared-memory channel ", name));
  }
  return base;
}

void InitializeSegment(void* base, int num_readers, uint64_t ring_bytes, absl::Duration spin) {
  const Layout l = ComputeLayout(static_cast<uint64_t>(num_readers), ring_bytes);
  std::byte* bytes = static_cast<std::byte*>(base);
  auto* header = new (base) SegmentHeader{};
  for (int r = 0; r < num_readers; ++r) new (bytes + l.slots + r * sizeof(ReaderSlot)) ReaderSlot{};
  new (bytes + l.broadcast) RingControl{};
  for (int r = 0; r < num_readers; ++r) {
    new (bytes + l.broadcast + sizeof(RingControl) + r * sizeof(RingTail)) RingTail{};
    new (bytes + l.replies + r * sizeof(ReplyRing)) ReplyRing{};
  }
  header->version = kShmVersion;
  header->num_readers = static_cast<uint32_t>(num_readers);
  header->ring_bytes = ring_bytes;
  header->segment_bytes = l.total;
  header->spin_ns = absl::ToInt64Nanoseconds(spin);
  std::atomic_ref<uint64_t>(header->magic).store(kShmMagic, std::memory_order_release);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmHub>> ShmHub::Create(int num_readers, size_t ring_bytes, absl::Duration spin) {
  TPSERVE_RETURN_IF_ERROR(CheckHubArguments(num_readers, ring_bytes));
  TPSERVE_ASSIGN_OR_RETURN(std::string name, RandomName());
  const size_t bytes = ComputeLayout(static_cast<uint64_t>(num_readers), ring_bytes).total;
  TPSERVE_ASSIGN_OR_RETURN(void* base, CreateSegment(name, bytes));
  InitializeSegment(base, num_readers, ring_bytes, spin);
  return std::unique_ptr<ShmHub>(new ShmHub(std::move(name), base, bytes));
}

ShmHub::ShmHub(std::string name, void* base, size_t bytes)
    : ShmMapping(std::move(name), base, bytes),
      broadcast_(Broadcast(), spin_ns()),
      receiving_(new std::atomic<bool>[static_cast<size_t>(num_readers())]) {
  for (int r = 0; r < num_readers(); ++r) {
    replies_.emplace_back(Replies(r), 0, spin_ns());
    receiving_[static_cast<size_t>(r)].store(false);
  }
}

ShmHub::~ShmHub() { Close(absl::UnavailableError(absl::StrCat("shared-memory channel ", name(), " was destroyed"))); }

absl::Status ShmHub::PublishStop() const {
  TPSERVE_RETURN_IF_ERROR(LocalClosed());
  if (Ref(header().readers_gone).load(std::memory_order_acquire) == 0) return absl::OkStatus();
  for (int r = 0; r < num_readers(); ++r) {
    ReaderSlot& s = slot(r);
    if (Ref(s.gone).load(std::memory_order_acquire) != 0) {
      return absl::UnavailableError(absl::StrCat("reader ", r, " closed its end of shared-memory channel ", name(),
                                                 ": ", ReadWhy(s.why)));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmHub::ReceiveStop(int reader) const {
  TPSERVE_RETURN_IF_ERROR(LocalClosed());
  ReaderSlot& s = slot(reader);
  if (Ref(s.gone).load(std::memory_order_acquire) == 0) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("reader ", reader, " closed its end of shared-memory channel ", name(),
                                             " and sent nothing more: ", ReadWhy(s.why)));
}

absl::Status ShmHub::Publish(std::string_view message) {
  OneCaller one(publishing_, "ShmHub::Publish");
  auto stop = [this] { return PublishStop(); };
  TPSERVE_RETURN_IF_ERROR(stop());
  return broadcast_.Write(message, stop);
}

absl::StatusOr<std::string> ShmHub::Receive(int reader) {
  TPSERVE_CHECK(reader >= 0 && reader < num_readers(), "ShmHub::Receive: reader ", reader, " of ", num_readers());
  OneCaller one(receiving_[static_cast<size_t>(reader)], "ShmHub::Receive(reader)");
  TPSERVE_RETURN_IF_ERROR(LocalClosed());
  std::string message;
  TPSERVE_RETURN_IF_ERROR(
      replies_[static_cast<size_t>(reader)].Read(message, [this, reader] { return ReceiveStop(reader); }));
  return message;
}

void ShmHub::Close(const absl::Status& why) {
  if (!MarkClosed(why)) return;
  SegmentHeader& h = header();
  CopyWhy(h.hub_why, LocalClosed().message());
  Ref(h.hub_closed).store(1, std::memory_order_release);
  const RingView broadcast = Broadcast();
  WakeAll(broadcast.control->data);   // readers in Receive
  WakeAll(broadcast.control->space);  // our Publish
  for (int r = 0; r < num_readers(); ++r) {
    const RingView reply = Replies(r);
    WakeAll(reply.control->data);   // our Receive(r)
    WakeAll(reply.control->space);  // reader r in Reply
  }
  Unlink();
}

// ---- ShmEndpoint ----

namespace {

absl::Status CheckSegment(const SegmentHeader& h, size_t file_bytes, const std::string& name, int reader) {
  const std::string what = absl::StrCat("shared-memory segment ", name);
  if (std::atomic_ref<uint64_t>(const_cast<uint64_t&>(h.magic)).load(std::memory_order_acquire) != kShmMagic) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a tpserve channel (no magic word)"));
  }
  if (h.version != kShmVersion) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has channel version ", h.version, ", this build speaks ",
                                                   kShmVersion, ": the coordinator and worker come from "
                                                   "different builds"));
  }
  if (h.num_readers < 1 || h.num_readers > kMaxReaders || !IsPowerOfTwo(h.ring_bytes) ||
      h.segment_bytes != ComputeLayout(h.num_readers, h.ring_bytes).total || h.segment_bytes != file_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has an inconsistent header (", h.num_readers,
                                                   " readers, ring ", h.ring_bytes, " bytes, ", file_bytes,
                                                   " bytes on file)"));
  }
  if (reader < 0 || reader >= static_cast<int>(h.num_readers)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has readers 0..", h.num_readers - 1, "; reader ", reader, " is out of range"));
  }
  return absl::OkStatus();
}

// Opens and maps an existing segment; its address and size.
absl::StatusOr<std::pair<void*, size_t>> MapSegment(const std::string& name) {
  if (name.size() < 2 || name.size() > NAME_MAX || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\" is not a shared-memory channel name (\"/name\", "
                                                   "as ShmHub::name() gives it)"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0 && errno == ENOENT) {
    return absl::NotFoundError(absl::StrCat("no shared-memory channel ", name, " (/dev/shm", name,
                                            "): its hub closed, all its readers already opened it, or it is on "
                                            "another host; use the gRPC session instead"));
  }
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("shm_open(", name, ")"));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(SegmentHeader)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("shared-memory segment ", name, " is not a tpserve channel (",
                                                   st.st_size, " bytes)"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (base == MAP_FAILED) return absl::ErrnoToStatus(mmap_errno, absl::StrCat("mmap of ", name));
  return std::make_pair(base, bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmEndpoint>> ShmEndpoint::Open(const std::string& name, int reader) {
  TPSERVE_ASSIGN_OR_RETURN(auto mapped, MapSegment(name));
  auto [base, bytes] = mapped;
  SegmentHeader& h = *static_cast<SegmentHeader*>(base);
  absl::Status ok = CheckSegment(h, bytes, name, reader);
  if (ok.ok()) {
    auto* slots = reinterpret_cast<ReaderSlot*>(static_cast<std::byte*>(base) +
                                                ComputeLayout(h.num_readers, h.ring_bytes).slots);
    uint32_t expected = 0;
    if (!Ref(slots[reader].opened).compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      ok = absl::AlreadyExistsError(absl::StrCat("reader ", reader, " of shared-memory channel ", name,
                                                 " is already open; each reader opens it once"));
    }
  }
  if (!ok.ok()) {
    munmap(base, bytes);
    return ok;
  }
  std::unique_ptr<ShmEndpoint> endpoint(new ShmEndpoint(name, base, bytes, reader));
  // The last reader to arrive removes the name: the segment then lives only as long as its mappings.
  if (Ref(h.readers_opened).fetch_add(1, std::memory_order_acq_rel) + 1 == h.num_readers) endpoint->Unlink();
  return endpoint;
}

ShmEndpoint::ShmEndpoint(std::string name, void* base, size_t bytes, int reader)
    : ShmMapping(std::move(name), base, bytes),
      reader_(reader),
      broadcast_(Broadcast(), reader, spin_ns()),
      reply_(Replies(reader), spin_ns()) {}

ShmEndpoint::~ShmEndpoint() {
  Close(absl::UnavailableError(absl::StrCat("reader ", reader_, "'s endpoint was destroyed")));
}

absl::Status ShmEndpoint::PeerStop() const {
  TPSERVE_RETURN_IF_ERROR(LocalClosed());
  SegmentHeader& h = header();
  if (Ref(h.hub_closed).load(std::memory_order_acquire) == 0) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("the hub closed shared-memory channel ", name(), ": ", ReadWhy(h.hub_why)));
}

absl::StatusOr<std::string> ShmEndpoint::Receive() {
  OneCaller one(receiving_, "ShmEndpoint::Receive");
  TPSERVE_RETURN_IF_ERROR(LocalClosed());
  std::string message;
  TPSERVE_RETURN_IF_ERROR(broadcast_.Read(message, [this] { return PeerStop(); }));
  return message;
}

absl::Status ShmEndpoint::Reply(std::string_view message) {
  OneCaller one(replying_, "ShmEndpoint::Reply");
  auto stop = [this] { return PeerStop(); };
  TPSERVE_RETURN_IF_ERROR(stop());
  return reply_.Write(message, stop);
}

void ShmEndpoint::Close(const absl::Status& why) {
  if (!MarkClosed(why)) return;
  ReaderSlot& s = slot(reader_);
  CopyWhy(s.why, LocalClosed().message());
  Ref(s.gone).store(1, std::memory_order_release);
  Ref(header().readers_gone).fetch_add(1, std::memory_order_acq_rel);
  const RingView broadcast = Broadcast();
  const RingView reply = Replies(reader_);
  WakeAll(broadcast.control->data);   // our Receive
  WakeAll(broadcast.control->space);  // the hub's Publish
  WakeAll(reply.control->data);       // the hub's Receive(reader)
  WakeAll(reply.control->space);      // our Reply
}

}  // namespace tpserve
