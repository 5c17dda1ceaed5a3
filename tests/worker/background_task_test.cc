// BackgroundTask: a started task runs once on the thread, Wait returns after
// it; CancelUnstarted drops a task the thread has not begun (it never runs)
// and leaves one it has begun to finish (StepRunner's masks, when the step
// thread does the work itself).
#include "worker/background_task.h"

#include <atomic>
#include <cstdio>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(BackgroundTask, RunsEachStartedTaskOnceAndWaits) {
  BackgroundTask task("tpserve-test");
  EXPECT_FALSE(task.CancelUnstarted());  // none started
  task.Wait();                           // at once
  int runs = 0;
  for (int i = 0; i < 50; ++i) {
    task.Start([&runs] { ++runs; });
    task.Wait();
    EXPECT_EQ(runs, i + 1);
  }
}

TEST(BackgroundTask, CancelLeavesABegunTaskToFinish) {
  BackgroundTask task;
  absl::Notification begun, release;
  std::atomic<bool> finished{false};
  task.Start([&] {
    begun.Notify();
    release.WaitForNotification();
    finished = true;
  });
  begun.WaitForNotification();
  EXPECT_FALSE(task.CancelUnstarted());  // it has begun: not dropped
  release.Notify();
  task.Wait();
  EXPECT_TRUE(finished);
}

// Started and cancelled at once, many times: each task either never ran
// (cancelled) or ran exactly once (not), and the thread stays usable. Which
// of the two happens is the scheduler's; both counts are printed.
TEST(BackgroundTask, CancelledTasksNeverRun) {
  BackgroundTask task;
  std::atomic<int> runs{0};
  int cancelled = 0;
  for (int i = 0; i < 2000; ++i) {
    task.Start([&runs] { runs.fetch_add(1); });
    if (task.CancelUnstarted()) {
      ++cancelled;
    } else {
      task.Wait();
    }
    ASSERT_EQ(runs.load() + cancelled, i + 1) << "task " << i;
  }
  task.Wait();
  EXPECT_EQ(runs.load() + cancelled, 2000);
  std::printf("cancelled before they began: %d of 2000\n", cancelled);
}

}  // namespace
}  // namespace tpserve
