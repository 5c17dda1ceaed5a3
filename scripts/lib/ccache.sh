# shellcheck shell=bash
# Sourced by scripts/test.sh, scripts/test-sanitized.sh and scripts/fuzz.sh: the
# compile cache that lets a second run on the same machine skip the compiles whose
# inputs did not change (the build, demo, ASan and fuzz folders each hit their own
# entries). Without ccache (scripts/install-deps.sh installs it) nothing changes.
#
#   ccache_setup          exports the launchers below when ccache is installed, and
#                         says in the stage table whether the run compiles through it.
#                         Call it after scripts/install-deps.sh: on a fresh machine
#                         (CI's) ccache arrives with it, and a check made before
#                         would compile the whole run without a cache
#   ccache_note NAME      a stage-table row: the compiles since the last call (or
#                         since ccache_setup) and how many came from the cache
#
#   CCACHE_DIR       where the cache lives, outside the tree so that a fresh clone
#                    finds it: default ${XDG_CACHE_HOME:-~/.cache}/tpserve/ccache
#   CCACHE_MAXSIZE   its size cap, default 5G (build/'s objects alone are 1.3 GB
#                    before ccache compresses them)
#   TPSERVE_CCACHE=0 no cache
#
# The launchers go to CMake through the environment variables
# CMAKE_<LANG>_COMPILER_LAUNCHER, which CMake reads on a folder's first configure
# only: a build folder configured without them keeps its compile commands (and
# is not rebuilt because of this file). CUDA too: ccache caches nvcc's -c
# compiles.
# Paths are hashed relative to the clone (CCACHE_BASEDIR) and the working
# folder is left out of the hash (CCACHE_NOHASHDIR), so another clone of the
# same sources hits too; the debug info of a hit names the folder of the clone
# that filled the cache (gdb's `set substitute-path` maps it).
ccache_setup() {
  if [[ ${TPSERVE_CCACHE:-1} == 0 ]]; then
    _ccache_note_once "off (TPSERVE_CCACHE=0)"
    return 0
  fi
  if ! command -v ccache >/dev/null; then
    _ccache_note_once "off: ccache is not installed (scripts/install-deps.sh installs it)"
    return 0
  fi
  export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tpserve/ccache}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
  mkdir -p "$CCACHE_DIR"
  _ccache_note_once "ccache in $CCACHE_DIR"
  _ccache_counts
  _ccache_last=$_ccache_now
}

# One row per run, not one per script a run nests (scripts/test.sh runs the others).
_ccache_note_once() {
  [[ -n ${TPSERVE_CCACHE_NOTED:-} ]] && return 0
  export TPSERVE_CCACHE_NOTED=1
  stage_note "compile cache" "$1"
}

# "<hits> <compiles>" from ccache's counters into _ccache_now.
_ccache_counts() {
  _ccache_now=$(ccache --print-stats 2>/dev/null | awk -F '\t' '
    $1 ~ /^(direct|preprocessed)_cache_hit$/ { hit += $2 }
    $1 == "cache_miss" { miss += $2 }
    END { printf "%d %d", hit, hit + miss }')
}

ccache_note() {
  [[ -n ${_ccache_last:-} ]] || return 0
  _ccache_counts
  local hit0 all0 hit all
  read -r hit0 all0 <<<"$_ccache_last"
  read -r hit all <<<"$_ccache_now"
  _ccache_last=$_ccache_now
  stage_note "  $1, ccache" "$((hit - hit0)) of $((all - all0)) compiles from the cache"
}
