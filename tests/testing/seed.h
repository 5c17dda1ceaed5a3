// The seed of a randomized test, replayable: TPSERVE_TEST_SEED=<n> makes every
// randomized test draw the same inputs again.
#pragma once

#include <cstdint>

namespace tpserve::testing_util {

// TPSERVE_TEST_SEED when it is set (a decimal number), else a fresh random
// seed below 2^32. Either way the seed is written to stderr with the running
// test's name and recorded as its "tpserve_test_seed" property (the XML report),
// so a failure can be replayed. Call it once per test (or per case) and give the
// seed to the random generator; a SCOPED_TRACE of it puts it in every failure.
uint64_t TestSeed();

}  // namespace tpserve::testing_util
