// base/sanitizers.h: TPSERVE_ASAN and kAddressSanitizer say "ASan" exactly when the
// AddressSanitizer runtime is linked into the test, under GCC and under clang (whose
// version 14 defines no __SANITIZE_ADDRESS__: a test that asked for that macro ran
// its unsanitized workload in the clang ASan build and timed out).
#include "base/sanitizers.h"

#include <gtest/gtest.h>

// The runtime's entry point, in GCC's libasan and clang's libclang_rt.asan alike.
// Weak: without the runtime the program still links and sees a null address.
extern "C" void __asan_init() __attribute__((weak));

namespace tpserve {
namespace {

bool AsanRuntimeLinked() {
  void (*volatile init)() = &__asan_init;  // volatile: asked at run time, not folded
  return init != nullptr;
}

TEST(SanitizersTest, AddressSanitizerIsDetectedExactlyWhenItsRuntimeIsLinked) {
  const bool runtime = AsanRuntimeLinked();
  EXPECT_EQ(kAddressSanitizer, runtime)
      << "base/sanitizers.h says ASan " << (kAddressSanitizer ? "on" : "off") << " but the runtime is "
      << (runtime ? "linked" : "absent") << ": the compiler's way of announcing -fsanitize=address changed; "
      << "add its macro or __has_feature spelling to base/sanitizers.h";
  EXPECT_EQ(TPSERVE_ASAN, runtime ? 1 : 0);
}

}  // namespace
}  // namespace tpserve
