// Tests that hang on purpose: the subjects of the watchdog's tests in
// harness_test.cc, which run this binary with a tiny TPSERVE_TEST_TIMEOUT.
// Not registered with ctest.
#include <gtest/gtest.h>

#include "tests/e2e/harness.h"

namespace tpserve::e2e {
namespace {

// Blocked on a process of its own: the watchdog's kill ends the wait, and the
// test ends, failed.
TEST(HarnessWatchdogSubject, BlockedOnItsServer) {
  TempDir dir;
  Process server({"sh", "-c", "echo the server is up; exec sleep 1000"}, dir.path() + "/server.log");
  AwaitLine(server, "the server is ");
  WaitingFor waiting("the server to answer (it never will)");
  server.Wait(absl::InfiniteDuration());
}

// Blocked on something the kill does not end: the binary exits.
TEST(HarnessWatchdogSubject, BlockedForever) {
  TempDir dir;
  Process server({"sh", "-c", "echo the server is up; exec sleep 1000"}, dir.path() + "/server.log");
  AwaitLine(server, "the server is ");
  WaitingFor waiting("a sleep of an hour");
  absl::SleepFor(absl::Hours(1));
}

}  // namespace
}  // namespace tpserve::e2e
