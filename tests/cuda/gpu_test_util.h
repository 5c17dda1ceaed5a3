// Shared by the GPU tests: skip (with a message) when there is no CUDA device.
#pragma once

#include <gtest/gtest.h>

#include "cuda/check.h"

#define TPSERVE_REQUIRE_GPU()                                                  \
  do {                                                                         \
    if (::tpserve::cuda::DeviceCount() == 0)                                   \
      GTEST_SKIP() << "no CUDA device present: GPU test skipped (run "         \
                      "scripts/gpu-check.sh on a machine with a GPU)";         \
  } while (0)
