// Whether this translation unit is compiled with AddressSanitizer, asked the same
// way under GCC and clang. GCC defines __SANITIZE_ADDRESS__; clang 14 (Debian 12's,
// which scripts/test-sanitized.sh and the fuzz build use) does not, it answers
// __has_feature(address_sanitizer) instead (clang defines the GCC macro only from
// llvm-project PR 153888, 2025). A bare `#if defined(__SANITIZE_ADDRESS__)` is false
// in a clang ASan build: matcher_test then ran 5x its sanitized rounds (300 s
// timeouts) and the RSS bounds that ASan's quarantine breaks were checked.
//
//   TPSERVE_ASAN        1 under -fsanitize=address, else 0 (use `#if TPSERVE_ASAN`)
//   kAddressSanitizer   the same as a constexpr bool, for `if constexpr` and values
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define TPSERVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TPSERVE_ASAN 1
#endif
#endif
#ifndef TPSERVE_ASAN
#define TPSERVE_ASAN 0
#endif

namespace tpserve {

inline constexpr bool kAddressSanitizer = TPSERVE_ASAN != 0;

}  // namespace tpserve
