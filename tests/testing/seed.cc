#include "tests/testing/seed.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace tpserve::testing_util {
namespace {

// FNV-1a, 64 bits, folded to 32: stable across compilers and runs (std::hash is not).
uint64_t StableHash(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return (h ^ (h >> 32)) & 0xffffffffull;
}

// How many seeds the running test drew so far (a test may draw one per case).
int NextDraw(const std::string& test) {
  static std::mutex mu;
  static std::string current;
  static int draws = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (test != current) {
    current = test;
    draws = 0;
  }
  return draws++;
}

}  // namespace

uint64_t TestSeed() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name =
      test != nullptr ? std::string(test->test_suite_name()) + "." + test->name() : "(no test)";
  const int draw = NextDraw(name);
  uint64_t seed = 0;
  const char* env = std::getenv("TPSERVE_TEST_SEED");
  const char* how = "fixed";
  if (env == nullptr || *env == '\0') {
    seed = StableHash(name + "#" + std::to_string(draw));
  } else if (std::strcmp(env, "random") == 0) {
    seed = std::random_device{}();
    how = "random";
  } else {
    char* end = nullptr;
    errno = 0;
    seed = std::strtoull(env, &end, 10);
    if (errno != 0 || *end != '\0') {
      ADD_FAILURE() << "TPSERVE_TEST_SEED=" << env << " is neither a decimal number nor \"random\"";
    }
    how = "given";
  }
  std::fprintf(stderr, "%s: seed %llu (%s; TPSERVE_TEST_SEED=%llu replays it)\n", name.c_str(),
               static_cast<unsigned long long>(seed), how, static_cast<unsigned long long>(seed));
  ::testing::Test::RecordProperty("tpserve_test_seed", std::to_string(seed));
  return seed;
}

}  // namespace tpserve::testing_util
