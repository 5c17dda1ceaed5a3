// Shared by the GPU tests: skip (with a message) when there is no CUDA device,
// or fail when the environment says a device must be there
// (TPSERVE_REQUIRE_GPU=1, which scripts/gpu-check.sh sets: a GPU run whose
// tests all skipped would otherwise pass having tested nothing). Either way
// the message carries the runtime's error and the driver's version.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cuda/check.h"

#define TPSERVE_REQUIRE_GPU()                                                                        \
  do {                                                                                               \
    std::string tpserve_no_gpu_;                                                                     \
    if (::tpserve::cuda::DeviceCount(&tpserve_no_gpu_) == 0) {                                       \
      if (::tpserve::cuda::GpuRequiredByEnvironment())                                               \
        FAIL() << "no usable CUDA device, and TPSERVE_REQUIRE_GPU=1 says this run must have one: "   \
               << tpserve_no_gpu_;                                                                   \
      GTEST_SKIP() << "no usable CUDA device: GPU test skipped (run scripts/gpu-check.sh on a "      \
                      "machine with a GPU); "                                                        \
                   << tpserve_no_gpu_;                                                               \
    }                                                                                                \
  } while (0)
