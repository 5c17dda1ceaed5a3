// TPSERVE_FUZZ_CHECK(cond): the fuzzers' invariant check. A broken invariant prints
// the condition and its line, then aborts, so libFuzzer saves the input as a crash.
// Header-only: the fuzz build (-DTPSERVE_FUZZ=ON, scripts/fuzz.sh) builds no test library.
#pragma once

#include <cstdio>
#include <cstdlib>

#define TPSERVE_FUZZ_CHECK(cond)                                                        \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
