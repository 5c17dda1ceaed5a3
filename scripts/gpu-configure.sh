#!/usr/bin/env bash
# Configures the engine-only build (-DTPSERVE_ENGINE_ONLY=ON: no gRPC, tokenizer,
# coordinator) against a folder packed by scripts/pack-gpu-deps.sh and nothing
# else from outside the repository: GoogleTest is built from the packed sources
# into BUILD/_gtest, abseil, nlohmann-json and gloo come from DEPS. Used by
# scripts/gpu-check.sh on the GPU machine and by scripts/check-gpu-deps.sh here.
#
#   scripts/gpu-configure.sh DEPS BUILD [extra cmake arguments...]
#
# Writes BUILD.configure.log; on failure prints its end and exits 2.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
deps="$(realpath "$1")"
build="$2"
shift 2
arch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
if [[ ! -d "$deps/src/googletest" ]]; then
  echo "gpu-configure: $deps has no src/googletest; run scripts/pack-gpu-deps.sh on a machine with the" \
    "Debian packages and bring the folder along" >&2
  exit 2
fi
mkdir -p "$build"
gtest_prefix="$(realpath "$build")/_gtest"
if [[ ! -f "$gtest_prefix/lib/cmake/GTest/GTestConfig.cmake" ]]; then
  { cmake -S "$deps/src/googletest" -B "$build/_gtest_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$gtest_prefix" -DBUILD_GMOCK=ON -DINSTALL_GTEST=ON &&
    cmake --build "$build/_gtest_build" &&
    cmake --install "$build/_gtest_build"; } >"$build.gtest.log" 2>&1 ||
    { tail -20 "$build.gtest.log"; echo "gpu-configure: GoogleTest build failed (log: $build.gtest.log)" >&2; exit 2; }
fi
# The packed libraries come first for the linker (-rpath-link: gloo's own
# dependencies) and are the only non-system folders it is given. The
# executables get DT_RPATH (--disable-new-dtags), not DT_RUNPATH: a RUNPATH
# serves only an executable's direct dependencies, so libgloo's own (hiredis,
# ibverbs, ...) would be looked for in the system folders alone and missed there.
packed_libs="$deps/lib:$deps/lib/$arch"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPSERVE_ENGINE_ONLY=ON -DTPSERVE_CUDA_EMU=OFF \
  -DCMAKE_PREFIX_PATH="$deps;$gtest_prefix" -DCMAKE_INCLUDE_PATH="$deps/include" \
  -DCMAKE_LIBRARY_PATH="$deps/lib;$deps/lib/$arch" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--no-undefined -Wl,--disable-new-dtags -Wl,-rpath-link,$packed_libs" \
  -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--no-undefined -Wl,-rpath-link,$packed_libs" \
  "$@" >"$build.configure.log" 2>&1 ||
  { tail -30 "$build.configure.log"; echo "gpu-configure: configure failed (log: $build.configure.log)" >&2; exit 2; }
grep -E "^-- tpserve: (CUDA backend|gloo|NCCL)" "$build.configure.log" | sed 's/^-- /gpu-configure: /'
