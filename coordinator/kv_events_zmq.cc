#include "coordinator/kv_events_zmq.h"

#include <zmq.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

namespace v1 = tpserve::v1;

// The few msgpack forms a batch needs (big-endian, the shortest encoding).
class MsgPack {
 public:
  void Array(size_t n) { Header(n, 0x90, 16, 0xdc, 0xdd); }
  void Nil() { out_.push_back(static_cast<char>(0xc0)); }
  void Uint(uint64_t v) {
    if (v < 128) {
      out_.push_back(static_cast<char>(v));
    } else if (v <= 0xff) {
      Tagged(0xcc, v, 1);
    } else if (v <= 0xffff) {
      Tagged(0xcd, v, 2);
    } else if (v <= 0xffffffffull) {
      Tagged(0xce, v, 4);
    } else {
      Tagged(0xcf, v, 8);
    }
  }
  void Double(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    Tagged(0xcb, bits, 8);
  }
  void Str(const std::string& s) {  // the tags are short
    out_.push_back(static_cast<char>(0xa0 | s.size()));
    out_ += s;
  }
  std::string Take() { return std::move(out_); }

 private:
  void Tagged(uint8_t tag, uint64_t v, int bytes) {
    out_.push_back(static_cast<char>(tag));
    for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void Header(size_t n, uint8_t fix, size_t fix_limit, uint8_t tag16, uint8_t tag32) {
    if (n < fix_limit) {
      out_.push_back(static_cast<char>(fix | n));
    } else if (n <= 0xffff) {
      Tagged(tag16, n, 2);
    } else {
      Tagged(tag32, n, 4);
    }
  }
  std::string out_;
};

template <typename Repeated>
void UintArray(MsgPack& m, const Repeated& values) {
  m.Array(static_cast<size_t>(values.size()));
  for (auto v : values) m.Uint(v);
}

std::string SeqBytes(int64_t seq) {
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<char>((static_cast<uint64_t>(seq) >> (56 - 8 * i)) & 0xff);
  return b;
}

// Sends `parts` as one multipart message; false on error.
bool SendParts(void* socket, const std::vector<std::string>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    const int more = i + 1 < parts.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(socket, parts[i].data(), parts[i].size(), more) < 0) return false;
  }
  return true;
}

std::string LastEndpoint(void* socket) {
  char buf[256];
  size_t len = sizeof buf;
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buf, &len) != 0) return "";
  return std::string(buf, strnlen(buf, len));
}

}  // namespace

absl::StatusOr<std::string> ZmqEndpointForGroup(const std::string& endpoint, int group, absl::string_view flag) {
  if (group == 0) return endpoint;
  if (absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://")) {
    return absl::StrCat(endpoint, "_dp", group);
  }
  const size_t colon = endpoint.rfind(':');
  if (!absl::StartsWith(endpoint, "tcp://") || colon < 6) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", endpoint,
                                                   "' gives each --dp group no endpoint of its own; use tcp://HOST:PORT "
                                                   "(group G on PORT+G), tcp://HOST:* or ipc://PATH"));
  }
  const std::string port = endpoint.substr(colon + 1);
  if (port == "*") return endpoint;
  int base = 0;
  if (!absl::SimpleAtoi(port, &base) || base < 1 || base + group > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": port '", port, "' of '", endpoint, "' plus group ", group,
                                                   " is no TCP port; use 1 .. ", 65535 - group, " or *"));
  }
  return absl::StrCat(endpoint.substr(0, colon + 1), base + group);
}

std::string EncodeVllmKvEventBatch(const v1::KvEventBatch& batch) {
  MsgPack m;
  m.Array(3);
  m.Double(batch.ts());
  m.Array(static_cast<size_t>(batch.events_size()));
  for (const v1::KvEvent& e : batch.events()) {
    if (e.has_stored()) {
      m.Array(7);
      m.Str("BlockStored");
      UintArray(m, e.stored().block_hashes());
      if (e.stored().has_parent_block_hash()) {
        m.Uint(e.stored().parent_block_hash());
      } else {
        m.Nil();
      }
      UintArray(m, e.stored().token_ids());
      m.Uint(e.stored().block_size());
      m.Nil();  // lora_id
      m.Nil();  // medium
    } else if (e.has_removed()) {
      m.Array(3);
      m.Str("BlockRemoved");
      UintArray(m, e.removed().block_hashes());
      m.Nil();  // medium
    } else {
      m.Array(1);
      m.Str("AllBlocksCleared");
    }
  }
  m.Uint(batch.dp_rank());
  return m.Take();
}

absl::StatusOr<std::unique_ptr<ZmqKvEvents>> ZmqKvEvents::Start(KvEventPublisher& events, const std::string& endpoint,
                                                               const std::string& replay_endpoint, std::string topic,
                                                               size_t replay_batches) {
  std::unique_ptr<ZmqKvEvents> z(new ZmqKvEvents());
  z->topic_ = std::move(topic);
  z->replay_batches_ = replay_batches;
  z->context_ = zmq_ctx_new();
  z->pub_ = zmq_socket(z->context_, ZMQ_PUB);
  if (zmq_bind(z->pub_, endpoint.c_str()) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-events-endpoint ", endpoint, ": ", zmq_strerror(zmq_errno()), " (e.g. tcp://*:5557)"));
  }
  z->endpoint_ = LastEndpoint(z->pub_);
  if (!replay_endpoint.empty()) {
    z->replay_ = zmq_socket(z->context_, ZMQ_ROUTER);
    if (zmq_bind(z->replay_, replay_endpoint.c_str()) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-events-replay-endpoint ", replay_endpoint, ": ",
                                                     zmq_strerror(zmq_errno()), " (e.g. tcp://*:5558)"));
    }
    z->replay_endpoint_ = LastEndpoint(z->replay_);
  }
  z->events_ = &events;
  ZmqKvEvents* self = z.get();
  // From the next batch on (no snapshot: vLLM's subscribers start from events).
  z->subscription_ = events.Subscribe(events.last_seq() + 1, [self](const v1::KvEventBatch& batch) {
    if (batch.snapshot()) return;
    std::string payload = EncodeVllmKvEventBatch(batch);
    absl::MutexLock lock(&self->mu_);
    self->outbox_.emplace_back(batch.seq(), std::move(payload));
  });
  z->thread_ = std::thread([self] { self->Run(); });
  return z;
}

void ZmqKvEvents::Run() {
  while (true) {
    std::deque<std::pair<uint64_t, std::string>> out;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      out.swap(outbox_);
    }
    for (auto& [seq, payload] : out) {
      SendParts(pub_, {topic_, SeqBytes(static_cast<int64_t>(seq)), payload});
      held_.emplace_back(seq, std::move(payload));
      while (held_.size() > replay_batches_) held_.pop_front();
    }
    if (replay_ == nullptr) {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &ZmqKvEvents::HasWork), absl::Milliseconds(50));
      continue;
    }
    // A replay request: [identity, "", start seq (8 bytes)] (REQ) or [identity, start] (DEALER).
    zmq_pollitem_t item{replay_, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 20) <= 0) continue;
    std::vector<std::string> parts;
    int more = 1;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, replay_, 0) < 0) {
        zmq_msg_close(&msg);
        break;
      }
      parts.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    if (parts.size() < 2 || parts.back().size() != 8) continue;
    uint64_t start = 0;
    for (char c : parts.back()) start = (start << 8) | static_cast<uint8_t>(c);
    std::vector<std::string> head(parts.begin(), parts.end() - 1);  // the envelope: identity (and "")
    for (const auto& [seq, payload] : held_) {
      if (seq < start) continue;
      std::vector<std::string> reply = head;
      reply.push_back(SeqBytes(static_cast<int64_t>(seq)));
      reply.push_back(payload);
      SendParts(replay_, reply);
    }
    std::vector<std::string> end = head;
    end.push_back(SeqBytes(-1));
    end.push_back("");
    SendParts(replay_, end);
  }
}

ZmqKvEvents::~ZmqKvEvents() {
  if (events_ != nullptr) events_->Unsubscribe(subscription_);
  if (thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  int linger = 0;
  for (void* s : {pub_, replay_}) {
    if (s == nullptr) continue;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(s);
  }
  if (context_ != nullptr) zmq_ctx_term(context_);
}

}  // namespace tpserve
