# shellcheck shell=bash
# Sourced by scripts/test.sh, scripts/test-sanitized.sh and scripts/fuzz.sh.
# TPSERVE_DEBUG_INFO=lines (.ci/run sets it) compiles with line tables only (GCC's
# -g1, clang's equivalent): file and line in backtraces and sanitizer reports, no
# variables for a debugger. The same code and warnings; 26% less compile time in
# build/ (14 files at -O2), 10% in build-asan/ (8 files at -O0, 2026-12-03).
#
#   debug_info_args BUILD_TYPE   sets the array debug_info to the CMake arguments
#                                for that build type (RelWithDebInfo, Debug, Release):
#                                empty unless TPSERVE_DEBUG_INFO=lines
debug_info_args() {
  debug_info=()
  [[ ${TPSERVE_DEBUG_INFO:-full} == lines ]] || return 0
  case $1 in
    RelWithDebInfo) debug_info=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG") ;;
    Debug) debug_info=(-DCMAKE_CXX_FLAGS_DEBUG="-g1") ;;
    Release | MinSizeRel) ;;  # no debug information to trim
    *) echo "debug_info_args: unknown build type '$1'" >&2; return 2 ;;
  esac
}
