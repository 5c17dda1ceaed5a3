// The stream of one Generate call between its output thread (the producer,
// coordinator/output_pool.h) and the call's consumer: responses in order, then one end status (OK after the
// Complete response, or the error that ends the call)
// (docs/architecture.md, "Threads and locks").
//
// Two kinds of consumer:
//  * event-driven (the Generate reactor, coordinator/generation_service.cc):
//    constructed with `on_ready`; it calls TryPop, and when that finds nothing
//    (kTimeout) the queue calls `on_ready` exactly once, on the producer's
//    thread with no lock held, as soon as a response or the end arrives. So
//    the consumer holds one "turn" at a time: it is either taking a response,
//    writing one (at most one write outstanding), or parked in the queue.
//  * blocking (tests): Pop with a wait.
//
// Chunks from PushChunk are merged as they come into the one Chunk waiting to
// be taken (token ids, text, reasoning, log-probs and tool calls appended in
// order): a consumer that fell behind sends one message for all of them, and
// the merged message is reused from take to take, so a stream costs its
// producer a lock and a few appends per token and no allocation once its
// buffers have grown (the consumer hands its last message back by taking the
// next one into the same object).
//
// Buffering is bounded: when `max_buffered` responses wait untaken and another
// arrives, the client has stopped reading; the queue drops what it holds and
// ends itself with RESOURCE_EXHAUSTED (the message names the bound and
// --max-buffered-chunks), and Push returns false so the producer stops
// generating for it. The producer never blocks on the consumer.
//
// Thread safety: one producer thread (Push, End) and one consumer at a time
// (TryPop/Pop, Cancel); every method may be called concurrently with the
// other side's. The queue never calls `on_ready` while holding its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tpserve/v1/generation.pb.h"

namespace tpserve {

class ResponseQueue {
 public:
  static constexpr int64_t kDefaultMaxBuffered = 1024;  // --max-buffered-chunks

  enum class Next {
    kMessage,  // *out holds the next response
    kEnd,      // the stream is over; *end holds its status (only once every response was taken)
    kTimeout,  // nothing yet (TryPop: `on_ready` will be called once when something arrives)
  };

  // `max_buffered` >= 1: the most responses held for a consumer that is not
  // taking them. `on_ready` (may be empty) must not call Push or End.
  explicit ResponseQueue(int64_t max_buffered = kDefaultMaxBuffered,
                         std::function<void()> on_ready = nullptr);

  ResponseQueue(const ResponseQueue&) = delete;
  ResponseQueue& operator=(const ResponseQueue&) = delete;

  // Producer. Queues `response`. False when it was dropped because the stream
  // is over: ended (End, Cancel, or an earlier overflow), or ending now
  // because `max_buffered` responses were already waiting (RESOURCE_EXHAUSTED).
  // After false the producer should stop generating for this stream and may
  // call End (ignored).
  bool Push(tpserve::v1::GenerateResponse response);
  // Producer. Appends one chunk's parts to the chunk waiting to be taken (a
  // fresh one when none waits): `append` runs under the queue's lock on a
  // response whose chunk holds what is waiting already; it adds to it
  // (add_token_ids, mutable_text()->append, ...) and sets the request id
  // when it is empty. Counts as one response against the bound; the same
  // false as Push. Responses pushed with Push before it stay before it.
  // `index`: the choice it belongs to (GenerateResponse.index, n > 1): a chunk
  // merges only into a waiting chunk of the same choice.
  bool PushChunk(uint32_t index, absl::FunctionRef<void(tpserve::v1::GenerateResponse&)> append);
  bool PushChunk(absl::FunctionRef<void(tpserve::v1::GenerateResponse&)> append) { return PushChunk(0, append); }
  // Producer. The last word: the consumer gets `status` after the responses
  // queued before it. Only the first End (or overflow, or Cancel) counts.
  void End(absl::Status status);

  // Consumer. Takes the next response or the end without waiting; kTimeout
  // when there is neither, and then `on_ready` (if any) will be called once.
  // A merged chunk (PushChunk) is swapped into *out: *out's old content goes
  // back to the queue to be reused, so a consumer that takes into the same
  // message every time allocates nothing for it.
  // With `merge_chunks`, the Chunks of the same choice waiting right behind a
  // Chunk come merged into it (token ids, text and log-probs appended in order): a consumer
  // that fell behind sends one message instead of many, which is what keeps
  // a busy server's write count near one per stream per step.
  Next TryPop(tpserve::v1::GenerateResponse* out, absl::Status* end, bool merge_chunks = false);
  // Consumer. Waits up to `wait` for the next response or the end.
  Next Pop(absl::Duration wait, tpserve::v1::GenerateResponse* out, absl::Status* end);

  struct CancelResult {
    bool producer_open = false;     // End had not come: the producer should be told to stop
    bool consumer_waiting = false;  // a TryPop was parked: `on_ready` will not come; the
                                    // caller now has the consumer's turn (and calls TryPop)
  };
  // Consumer side: the client went away (cancelled, deadline, a failed write).
  // Drops what is buffered (also after End: nobody will read it); the next
  // TryPop/Pop returns kEnd with `why`, later Pushes return false and End is
  // ignored. Only the first Cancel counts: later ones return {false, false}.
  CancelResult Cancel(absl::Status why);
  // Whether the consumer cancelled (Cancel was called): a Push that fails
  // then means the client went away, not that it fell behind.
  bool cancelled() const;

 private:
  // Takes the next response or the end into *out / *end, or kTimeout.
  void MergeWaitingChunksLocked(tpserve::v1::GenerateResponse& into) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bound is reached: drops everything and ends RESOURCE_EXHAUSTED.
  void OverflowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t BufferedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(items_.size()) + merged_count_;
  }
  Next TakeLocked(tpserve::v1::GenerateResponse* out, absl::Status* end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Clears `waiting_`; true when it was set (the caller then calls on_ready_).
  bool WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_buffered_;
  const std::function<void()> on_ready_;  // set once: read without the lock

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // for Pop: items_ or ended_ changed
  // Waiting responses: the merged chunk first (when merged_count_ > 0), then items_.
  tpserve::v1::GenerateResponse merged_ ABSL_GUARDED_BY(mu_);  // PushChunk's; reused
  int64_t merged_count_ ABSL_GUARDED_BY(mu_) = 0;              // pushes merged into it
  std::deque<tpserve::v1::GenerateResponse> items_ ABSL_GUARDED_BY(mu_);  // [<= max_buffered_ - merged_count_]
  bool ended_ ABSL_GUARDED_BY(mu_) = false;    // End, overflow or Cancel happened
  absl::Status end_ ABSL_GUARDED_BY(mu_);      // the status the consumer gets
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // Cancel happened
  // TryPop found nothing: on_ready_ is owed. Implies items_ empty and !ended_.
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tpserve
