#include "worker/background_task.h"

#include <pthread.h>

#include <utility>

#include "base/check.h"

namespace tpserve {

BackgroundTask::BackgroundTask(std::string name)
    : thread_([this, name = std::move(name)] {
        if (!name.empty()) pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
        Loop();
      }) {}

BackgroundTask::~BackgroundTask() {
  Wait();
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void BackgroundTask::Start(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  TPSERVE_CHECK(!busy_);
  task_ = std::move(task);
  busy_ = true;
}

void BackgroundTask::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &BackgroundTask::Idle));
}

bool BackgroundTask::CancelUnstarted() {
  absl::MutexLock lock(&mu_);
  if (task_ == nullptr) return false;
  task_ = nullptr;
  busy_ = false;
  return true;
}

void BackgroundTask::Loop() {
  for (;;) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BackgroundTask::HasWork));
      if (task_ == nullptr) return;  // stopping, nothing left to run
      task = std::move(task_);
      task_ = nullptr;
    }
    std::move(task)();  // outside the lock
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

}  // namespace tpserve
