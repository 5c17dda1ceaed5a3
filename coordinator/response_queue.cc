#include "coordinator/response_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tpserve {


ResponseQueue::ResponseQueue(int64_t max_buffered, std::function<void()> on_ready)
    : max_buffered_(max_buffered), on_ready_(std::move(on_ready)) {
  TPSERVE_CHECK(max_buffered_ >= 1);
}

void ResponseQueue::OverflowLocked() {
  items_.clear();
  merged_count_ = 0;
  ended_ = true;
  end_ = absl::ResourceExhaustedError(absl::StrCat(
      "the client stopped reading: more than ", max_buffered_,
      " responses were waiting to be sent (--max-buffered-chunks), so the request was "
      "aborted; read the stream as it arrives, or raise --max-buffered-chunks"));
  cv_.SignalAll();
  // The consumer is busy with a write (responses were waiting), so no wake is owed.
}

bool ResponseQueue::Push(v1::GenerateResponse response) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    if (BufferedLocked() >= max_buffered_) {
      OverflowLocked();
      return false;
    }
    items_.push_back(std::move(response));
    cv_.SignalAll();
    wake = WakeLocked();
  }
  if (wake) on_ready_();
  return true;
}

bool ResponseQueue::PushChunk(uint32_t index, absl::FunctionRef<void(v1::GenerateResponse&)> append) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    if (BufferedLocked() >= max_buffered_) {
      OverflowLocked();
      return false;
    }
    if (!items_.empty() || (merged_count_ > 0 && merged_.index() != index)) {
      // Behind a response of Push, or another choice's chunk: a response of
      // its own, so the order holds.
      v1::GenerateResponse& r = items_.emplace_back();
      r.mutable_chunk();
      r.set_index(index);
      append(r);
    } else {
      if (merged_count_ == 0) merged_.mutable_chunk()->Clear();  // keeps its buffers
      merged_.set_index(index);
      append(merged_);
      ++merged_count_;
    }
    cv_.SignalAll();
    wake = WakeLocked();
  }
  if (wake) on_ready_();
  return true;
}

void ResponseQueue::End(absl::Status status) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    end_ = std::move(status);
    cv_.SignalAll();
    wake = WakeLocked();
  }
  if (wake) on_ready_();
}

ResponseQueue::Next ResponseQueue::TryPop(v1::GenerateResponse* out, absl::Status* end, bool merge_chunks) {
  absl::MutexLock lock(&mu_);
  const Next next = TakeLocked(out, end);
  if (merge_chunks && next == Next::kMessage && out->has_chunk()) MergeWaitingChunksLocked(*out);
  if (next == Next::kTimeout && on_ready_) waiting_ = true;
  return next;
}

ResponseQueue::Next ResponseQueue::Pop(absl::Duration wait, v1::GenerateResponse* out,
                                       absl::Status* end) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + wait;
  while (BufferedLocked() == 0 && !ended_) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return TakeLocked(out, end);
}

ResponseQueue::CancelResult ResponseQueue::Cancel(absl::Status why) {
  absl::MutexLock lock(&mu_);
  CancelResult result;
  if (cancelled_) return result;
  cancelled_ = true;
  result.producer_open = !ended_;
  result.consumer_waiting = WakeLocked();
  items_.clear();  // nobody will read them
  merged_count_ = 0;
  ended_ = true;
  end_ = std::move(why);  // also after End: what was left unsent is gone
  cv_.SignalAll();
  return result;
}

bool ResponseQueue::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

ResponseQueue::Next ResponseQueue::TakeLocked(v1::GenerateResponse* out, absl::Status* end) {
  if (merged_count_ > 0) {
    out->Swap(&merged_);  // merged_ keeps *out's old buffers for the next PushChunk
    merged_count_ = 0;
    return Next::kMessage;
  }
  if (!items_.empty()) {
    *out = std::move(items_.front());
    items_.pop_front();
    return Next::kMessage;
  }
  if (ended_) {
    *end = end_;
    return Next::kEnd;
  }
  return Next::kTimeout;
}

void ResponseQueue::MergeWaitingChunksLocked(v1::GenerateResponse& response) {
  v1::Chunk& into = *response.mutable_chunk();
  while (!items_.empty() && items_.front().has_chunk() && items_.front().index() == response.index()) {
    v1::Chunk& next = *items_.front().mutable_chunk();
    into.mutable_token_ids()->MergeFrom(next.token_ids());
    into.mutable_text()->append(next.text());
    into.mutable_reasoning_text()->append(next.reasoning_text());
    for (v1::TokenLogprob& lp : *next.mutable_logprobs()) *into.add_logprobs() = std::move(lp);
    for (v1::ToolCall& call : *next.mutable_tool_calls()) *into.add_tool_calls() = std::move(call);
    items_.pop_front();
  }
}

bool ResponseQueue::WakeLocked() {
  const bool wake = waiting_;
  waiting_ = false;
  return wake;
}

}  // namespace tpserve
