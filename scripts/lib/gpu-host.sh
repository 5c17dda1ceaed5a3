# shellcheck shell=bash
# What scripts/gpu-check.sh's preflight asks of the machine before anything
# else, as functions (sourced; tests/scripts/gpu_check_test.sh calls them
# with other thresholds and stand-in tools):
#
#   host_libs_missing MIN_GLIBC GLIBCXX_TAG
#     The packed Debian libraries (scripts/pack-gpu-deps.sh) were built
#     against glibc MIN_GLIBC and need the C++ runtime's GLIBCXX_TAG. Prints
#     one line: what this machine has, or everything missing at once; status 1
#     when something is missing.
#   tool_works NAME PROBE CMD...
#     Runs CMD (a tool wrapped around the probe program, e.g. compute-sanitizer
#     --tool memcheck PROBE --alloc) under a 60 s limit. Prints "NAME: works" or
#     "NAME: does not work here: <the tool's first error line>"; status 0
#     when it works. A tool that cannot reach the device on this machine's
#     runtime (gVisor: "Device not supported", "LibraryNotLoaded") fails here,
#     so the phase that needs it is skipped with that line instead of failing.

# The libstdc++.so.6 the loader finds (the built programs link it from the system).
host_libstdcxx() {
  local lib
  lib="$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')"
  [[ -n "$lib" && -e "$lib" ]] || lib="$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)"
  [[ -e "$lib" ]] && echo "$lib"
}

host_libs_missing() {
  local min_glibc="$1" tag="$2" glibc lib newest missing=()
  glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  [[ -n "$glibc" ]] || glibc="$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$')"
  if [[ -z "$glibc" ]]; then
    missing+=("glibc >= $min_glibc (version unknown: no getconf or ldd)")
  elif [[ "$(printf '%s\n%s\n' "$min_glibc" "$glibc" | sort -V | head -1)" != "$min_glibc" ]]; then
    missing+=("glibc >= $min_glibc (this machine: $glibc)")
  fi
  lib="$(host_libstdcxx)"
  if [[ -z "$lib" ]]; then
    missing+=("$tag (no libstdc++.so.6 found)")
  elif ! grep -qaF "$tag" "$lib"; then
    newest="$(grep -aoE 'GLIBCXX_[0-9]+\.[0-9]+(\.[0-9]+)?' "$lib" | sort -Vu | tail -1)"
    missing+=("$tag ($lib: newest ${newest:-none})")
  fi
  if ((${#missing[@]})); then
    local IFS=';'
    echo "preflight: the packed Debian libraries need what this machine lacks:${missing[*]/#/ }"
    return 1
  fi
  echo "host libraries: glibc $glibc (>= $min_glibc), $lib has $tag"
}

tool_works() {
  local name="$1" probe="$2" out rc
  shift 2
  if [[ ! -x "$probe" ]]; then
    echo "$name: not tried (no probe program: nvcc failed to build scripts/lib/cuda-probe.cc)"
    return 1
  fi
  out="$(timeout 60 "$@" 2>&1)"
  rc=$?
  # compute-sanitizer ends a clean run with "ERROR SUMMARY: 0 errors": only
  # the tools' own error lines and the failures seen on gVisor count.
  if [[ $rc -eq 0 ]] && ! grep -qE '^==ERROR==|Device not supported|LibraryNotLoaded' <<<"$out"; then
    echo "$name: works"
    return 0
  fi
  local why
  why="$(grep -vE 'ERROR SUMMARY' <<<"$out" | grep -iE 'error|not supported|failed|unable' | head -1)"
  [[ -n "$why" ]] || why="$(tail -1 <<<"$out")"
  echo "$name: does not work here (exit $rc): ${why:-no output}"
  return 1
}
