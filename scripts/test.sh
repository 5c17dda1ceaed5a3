#!/usr/bin/env bash
# Installs what is needed, builds everything (CUDA code too when nvcc is present)
# with warnings as errors, and runs the whole test suite.
#
#   scripts/test.sh               build in build/, run every test (GPU tests skip without a GPU)
#   scripts/test.sh --sanitize    then also build the CPU code with ASan + UBSan in build-asan/ and
#                                 run the unit, tp and e2e tests there (scripts/test-sanitized.sh)
#   scripts/test.sh -L unit       pass ctest arguments through (here: only the unit label), to the
#                                 sanitized run too
#   scripts/test.sh -L cuda-emu   only the CUDA kernels run on the CPU by the SIMT runner
#                                 (tests/cuda_emu/; part of every full run when nvcc is present)
#   scripts/test.sh --repeat N    after the run, rerun the e2e, tp and soak labels N more times
#                                 (scripts/soak-suite.sh N): they must pass every round
#
# Every run ends with a table of its stages' wall and CPU seconds (also when a stage
# fails; scripts/lib/stage-times.sh), and compiles through ccache when it is
# installed (once scripts/install-deps.sh has run), in a cache outside the tree
# (scripts/lib/ccache.sh: CCACHE_DIR, TPSERVE_CCACHE=0): the demo build takes what
# build/ compiled, and a second run on the same machine skips unchanged compiles.
# TPSERVE_DEBUG_INFO=lines builds build/ with line tables only
# (-g1: file and line in backtraces, no variables for a debugger): the same code
# and warnings, 26% less compile time (14 of its files, picked at random).
# TPSERVE_BUILD_TYPE (default RelWithDebInfo) is build/'s CMake build type; .ci/run
# sets Release, the demo build's own flags (-O3, no debug info), so that the demo
# build below compiles nothing that build/ has not already put in the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/stage-times.sh
source scripts/lib/ccache.sh
source scripts/lib/debug-info.sh
stage_table_on_exit

sanitize=0
repeat=0
ctest_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sanitize) sanitize=1 ;;
    --repeat)
      [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || { echo "test.sh: --repeat takes a number of rounds" >&2; exit 2; }
      repeat=$2
      shift ;;
    --repeat=*) repeat=${1#--repeat=} ;;
    *) ctest_args+=("$1") ;;
  esac
  shift
done

stage_run install-deps scripts/install-deps.sh
ccache_setup  # after install-deps: on a fresh machine ccache comes with it
stage_run fetch-tokenizers scripts/fetch-tokenizers.sh \
  || echo "test.sh: real tokenizers unavailable; conformance tests will skip"
stage_run fetch-openai-client scripts/fetch-openai-client.sh \
  || echo "test.sh: the openai npm client is unavailable; the tpserve-http client test will skip"
stage_run fetch-json-schema-suite scripts/fetch-json-schema-suite.sh \
  || echo "test.sh: the JSON Schema Test Suite or ajv is unavailable; their grammar tests will skip"

jobs=$(nproc)
build=${TPSERVE_BUILD_DIR:-build}
build_type=${TPSERVE_BUILD_TYPE:-RelWithDebInfo}
debug_info_args "$build_type"
# TPSERVE_CUDA_ARCHITECTURES (.ci/run: 90) compiles the CUDA code for those
# architectures only, not the default 80 and 90: CI has no GPU, and nvcc took 45%
# less CPU for one (gemv.cu, sampling.cu). scripts/gpu-check.sh builds its own.
cuda_archs=()
[[ -n ${TPSERVE_CUDA_ARCHITECTURES:-} ]] && cuda_archs=(-DCMAKE_CUDA_ARCHITECTURES="$TPSERVE_CUDA_ARCHITECTURES")
stage_run configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DTPSERVE_WERROR=ON \
  "${debug_info[@]}" "${cuda_archs[@]}" >/dev/null
stage_run build cmake --build "$build" -j "$jobs"
ccache_note build

# scripts/demo.sh's own build (Release: GCC at -O3 warns where the -O2 build
# above does not), its four programs only, with warnings as errors: the first
# command a new user runs must read clean. 118 compiles at -O3: about 4 CPU-minutes
# (8 of them timed alone), 2 minutes of a 2-core run.
source scripts/lib/demo-build.sh
release=${TPSERVE_RELEASE_BUILD_DIR:-build-release}
stage_run "demo build: configure" cmake -S . -B "$release" "${demo_cmake_args[@]}" -DTPSERVE_WERROR=ON >/dev/null
stage_run "demo build" cmake --build "$release" -j "$jobs" --target "${demo_targets[@]}"
ccache_note "demo build"

stage_ctest ctest "$build" --output-on-failure -j "$jobs" "${ctest_args[@]}"

if [[ $repeat -gt 0 ]]; then
  TPSERVE_BUILD_DIR="$build" stage_run "soak-suite x$repeat" scripts/soak-suite.sh "$repeat"
fi

scripts/fuzz.sh "$build"  # its stages: fuzz build, fuzzing

if [[ $sanitize -eq 1 ]]; then
  scripts/test-sanitized.sh "${ctest_args[@]}"  # none: the unit, tp and e2e labels; its stages: ASan build, tests
fi
