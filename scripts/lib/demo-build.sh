# shellcheck shell=bash
# Sourced by scripts/demo.sh and scripts/test.sh: the demo's build, defined
# once, so that CI compiles exactly what a new user's first command compiles.
#
#   demo_cmake_args   the demo's configuration: Release (GCC at -O3, which warns
#                     where CI's RelWithDebInfo -O2 build does not), CPU only,
#                     no tests or benchmarks
#   demo_targets      the programs the demo runs

# shellcheck disable=SC2034  # used by the scripts that source this file
demo_cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTPSERVE_CUDA=OFF -DTPSERVE_BUILD_TESTS=OFF
                 -DTPSERVE_BUILD_BENCH=OFF)
# shellcheck disable=SC2034
demo_targets=(tpserve-coordinator tpserve-worker tpserve-client tpserve-make-model)
