// The seed of a randomized test: fixed in CI, random in the sweep, replayable.
//
//   TPSERVE_TEST_SEED unset      a fixed seed per test (from its name and how many
//                                seeds it drew before): every run, CI's included,
//                                draws the same inputs, so a test passes or fails
//                                for a reason, never for the seed it happened to draw
//   TPSERVE_TEST_SEED=random     a fresh random seed on every call: what
//                                scripts/seed-sweep.sh runs to hunt for seeds that
//                                fail (each one found becomes a fixed case)
//   TPSERVE_TEST_SEED=<n>        n on every call: replays a printed seed
#pragma once

#include <cstdint>

namespace tpserve::testing_util {

// The seed for the running test, as above (below 2^32). Either way it is
// written to stderr with the test's name and recorded as its
// "tpserve_test_seed" property (the XML report), so a failure can be replayed.
// Call it once per test (or per case) and give the seed to the random
// generator; a SCOPED_TRACE of it puts it in every failure.
uint64_t TestSeed();

}  // namespace tpserve::testing_util
