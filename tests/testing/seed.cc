#include "tests/testing/seed.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace tpserve::testing_util {

uint64_t TestSeed() {
  uint64_t seed = 0;
  const char* env = std::getenv("TPSERVE_TEST_SEED");
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    errno = 0;
    seed = std::strtoull(env, &end, 10);
    if (errno != 0 || *end != '\0') {
      ADD_FAILURE() << "TPSERVE_TEST_SEED=" << env << " is not a decimal number";
    }
  } else {
    seed = std::random_device{}();
  }
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name =
      test != nullptr ? std::string(test->test_suite_name()) + "." + test->name() : "(no test)";
  std::fprintf(stderr, "%s: seed %llu (TPSERVE_TEST_SEED=%llu replays it)\n", name.c_str(),
               static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  ::testing::Test::RecordProperty("tpserve_test_seed", std::to_string(seed));
  return seed;
}

}  // namespace tpserve::testing_util
