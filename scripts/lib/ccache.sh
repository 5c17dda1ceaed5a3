# shellcheck shell=bash
# Sourced by scripts/test.sh, scripts/test-sanitized.sh and scripts/fuzz.sh: the
# compile cache that lets a second run on the same machine skip the compiles whose
# inputs did not change (the build, demo, ASan and fuzz folders each hit their own
# entries). Without ccache (scripts/install-deps.sh installs it) nothing changes.
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
if [[ ${TPSERVE_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tpserve/ccache}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
  mkdir -p "$CCACHE_DIR"
fi
