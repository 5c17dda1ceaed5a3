// One task at a time on a thread of its own, started and waited for by one
// owner: rank 0's step runner computes the grammar masks of a step on it
// while its own thread runs the forward (docs/architecture.md, "Constrained
// output"). Reused step after step (no thread per step).
#pragma once

#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

class BackgroundTask {
 public:
  // `name`: the thread's name (at most 15 characters; ps, /proc, profilers), or none.
  explicit BackgroundTask(std::string name = "");
  ~BackgroundTask();  // after the running task, if any; joins the thread
  BackgroundTask(const BackgroundTask&) = delete;
  BackgroundTask& operator=(const BackgroundTask&) = delete;

  // Runs `task` on the thread. The previous task must have been waited for.
  void Start(absl::AnyInvocable<void() &&> task) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once the started task has run (at once when none was started).
  void Wait() ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the started task if the thread has not begun it (true: it never
  // runs, and Wait returns at once); false when it has begun or none was
  // started. The owner that does the task's work itself meanwhile need not
  // wait for a thread the scheduler has not run yet.
  bool CancelUnstarted() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_; }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || task_ != nullptr; }

  absl::Mutex mu_;
  absl::AnyInvocable<void() &&> task_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a task was started and has not finished
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tpserve
