#!/usr/bin/env bash
# Builds the CPU code with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/
# and runs the unit, tp and e2e tests there (scripts/test.sh --sanitize calls this; CI does).
#
#   scripts/test-sanitized.sh              the unit, tp and e2e labels
#   scripts/test-sanitized.sh -L unit      pass ctest arguments instead of the default labels
#   TPSERVE_ASAN_BUILD_DIR=DIR             build somewhere else than build-asan (build-asan-clang
#                                          with clang)
#   TPSERVE_ASAN_CXX=clang++               compile with clang instead of GCC (.ci/run does): a
#                                          fresh clone's whole sanitized stage, cold cache, at
#                                          657daf2 (2026-12-04): build 407 s / 802 CPU-s with
#                                          clang against GCC's 679 s / 1,336 (at 64e960c), tests
#                                          449 s against 417, every test passing, no report. The
#                                          tests that scale their work down under ASan ask
#                                          base/sanitizers.h (clang 14 defines no
#                                          __SANITIZE_ADDRESS__). GCC stays the plain default
#
# Every process the tests start (the tests themselves, and the tpserve-coordinator,
# tpserve-worker and tpserve-generate binaries the e2e harness spawns from the same
# build folder) stops at its first error and writes its report under
# build-asan/sanitizer-logs/. A report from any process fails this script even when the
# test that spawned it passed (a worker killed on purpose, a report in a child's log).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/stage-times.sh
source scripts/lib/ccache.sh
source scripts/lib/debug-info.sh
stage_table_on_exit
ccache_setup

asan_dir=build-asan
[[ $(basename "${TPSERVE_ASAN_CXX:-}") == clang++* ]] && asan_dir=build-asan-clang  # a folder per compiler
build=${TPSERVE_ASAN_BUILD_DIR:-$asan_dir}
jobs=$(nproc)
ctest_args=("$@")
[[ ${#ctest_args[@]} -eq 0 ]] && ctest_args=(-L 'unit|tp|e2e')

# The compiler launcher (ccache) comes from scripts/lib/ccache.sh.
debug_info_args Debug
compilers=()  # the toolchain's default (GCC) unless TPSERVE_ASAN_CXX names one
if [[ -n ${TPSERVE_ASAN_CXX:-} ]]; then
  cc=gcc
  [[ $(basename "$TPSERVE_ASAN_CXX") == clang++* ]] && cc=${TPSERVE_ASAN_CXX/clang++/clang}
  compilers=(-DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$TPSERVE_ASAN_CXX")
fi
stage_run "ASan build: configure" cmake -S . -B "$build" -G Ninja -DTPSERVE_WERROR=ON -DTPSERVE_SANITIZE=ON \
  "${compilers[@]}" \
  -DTPSERVE_CUDA=OFF -DTPSERVE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug "${debug_info[@]}" >/dev/null
stage_run "ASan build" cmake --build "$build" -j "$jobs"
ccache_note "ASan build"

logs="$PWD/$build/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
# halt_on_error + abort_on_error: the first report ends the process with SIGABRT, so its
# parent (ctest, the harness, the coordinator) sees a crash, not a clean exit.
# log_path: reports also land in files that the check below finds, whoever the parent was.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:check_initialization_order=1:\
strict_init_order=1:log_path=$logs/asan"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$logs/ubsan"
# Leaks inside third-party libraries, each with its reason in the file.
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=0"
status=0
stage_ctest "ASan tests" "$build" --output-on-failure -j "$jobs" "${ctest_args[@]}" || status=$?

reports=("$logs"/*)
if [[ -e "${reports[0]}" ]]; then
  for r in "${reports[@]}"; do
    echo "==== $r"
    head -n 80 "$r"
  done
  echo "test-sanitized.sh: FAILED: ${#reports[@]} sanitizer report(s) above, in $logs" >&2
  exit 1
fi
[[ $status -eq 0 ]] || { echo "test-sanitized.sh: FAILED: ctest exit status $status" >&2; exit "$status"; }
echo "test-sanitized.sh: no sanitizer reports"
