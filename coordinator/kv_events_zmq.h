// KV events as vLLM publishes them (vllm/distributed/kv_events.py), for routers
// that read vLLM's format unchanged: a ZeroMQ PUB socket sends each batch of a
// KvEventPublisher as the multipart message
//
//   [topic, seq (8 bytes, big-endian), msgpack KVEventBatch]
//
// with KVEventBatch = [ts, [event...], data_parallel_rank] and each event a
// tagged array: ["BlockStored", block_hashes, parent_block_hash | nil,
// token_ids, block_size, lora_id = nil, medium = nil], ["BlockRemoved",
// block_hashes, medium = nil], ["AllBlocksCleared"] (msgspec's array_like,
// tag=True). A ROUTER socket answers a replay request (8 bytes: the first seq
// wanted) with [seq, payload] for each batch it still holds (the last
// `replay_batches`), then [-1 (8 bytes), ""]. One thread owns both sockets;
// the publisher's sink only encodes and queues.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/kv_events.h"

namespace tpserve {

// One batch in vLLM's msgpack encoding (above).
std::string EncodeVllmKvEventBatch(const tpserve::v1::KvEventBatch& batch);

// Data-parallel group `group`'s endpoint, as vLLM offsets its engines'
// (offset_endpoint_port): group 0 binds `endpoint` itself; tcp://HOST:PORT
// becomes tcp://HOST:PORT+G (tcp://HOST:* stays: each binds a free port of its
// own), ipc:// and inproc:// get the suffix _dpG. `flag` names the flag in the
// INVALID_ARGUMENT for anything else or a port past 65535.
absl::StatusOr<std::string> ZmqEndpointForGroup(const std::string& endpoint, int group, absl::string_view flag);

class ZmqKvEvents {
 public:
  // Binds `endpoint` (PUB) and `replay_endpoint` (ROUTER; "" = none), e.g.
  // "tcp://*:5557" ("tcp://127.0.0.1:*" picks a port: endpoint() says which),
  // and subscribes to `events`, which must outlive this.
  static absl::StatusOr<std::unique_ptr<ZmqKvEvents>> Start(KvEventPublisher& events, const std::string& endpoint,
                                                            const std::string& replay_endpoint, std::string topic,
                                                            size_t replay_batches = 1024);
  ~ZmqKvEvents();  // unsubscribes, stops the thread, closes the sockets

  const std::string& endpoint() const { return endpoint_; }                // as bound
  const std::string& replay_endpoint() const { return replay_endpoint_; }  // "" = none

 private:
  ZmqKvEvents() = default;
  void Run();  // the socket thread
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !outbox_.empty(); }

  KvEventPublisher* events_ = nullptr;
  uint64_t subscription_ = 0;
  void* context_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;  // null: no replay socket
  std::string endpoint_, replay_endpoint_, topic_;
  size_t replay_batches_ = 0;
  absl::Mutex mu_;
  std::deque<std::pair<uint64_t, std::string>> outbox_ ABSL_GUARDED_BY(mu_);  // (seq, payload) to send
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::pair<uint64_t, std::string>> held_;  // the socket thread's replay buffer
  std::thread thread_;
};

}  // namespace tpserve
