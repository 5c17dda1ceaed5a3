// The stream of one Generate call between the engine loop (producer) and the
// gRPC handler thread (consumer): responses in order, then one end status
// (OK after the Complete response, or the error that ends the call).
#pragma once

#include <deque>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tpserve/v1/generation.pb.h"

namespace tpserve {

class ResponseQueue {
 public:
  enum class Next { kMessage, kEnd, kTimeout };

  void Push(tpserve::v1::GenerateResponse response) {
    absl::MutexLock lock(&mu_);
    items_.push_back(std::move(response));
    cv_.Signal();
  }
  // Only the first End counts.
  void End(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    end_ = std::move(status);
    cv_.Signal();
  }
  // Waits up to `wait` for the next response (kMessage) or the end (kEnd, with
  // the status; only once every response was taken).
  Next Pop(absl::Duration wait, tpserve::v1::GenerateResponse* out, absl::Status* end) {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + wait;
    while (items_.empty() && !ended_) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) break;
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

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<tpserve::v1::GenerateResponse> items_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve
