#!/usr/bin/env bash
# Every GPU test and the GPU benchmark in one go, on a machine with one NVIDIA
# GPU, the CUDA toolkit, CMake and ninja, but none of the Debian packages and no
# network. What it needs from outside the repository comes packed by
# scripts/pack-gpu-deps.sh (GoogleTest sources, nlohmann-json, abseil, gloo).
#
#   scripts/gpu-check.sh [DEPS_DIR]      (default: $TPSERVE_GPU_DEPS or shared/deps)
#
# Builds the engine core only (-DTPSERVE_ENGINE_ONLY=ON: no gRPC, tokenizer,
# coordinator), runs `ctest -L gpu`, runs bench/gpu/gpu_bench, writes the table
# to bench/results/gpu_bench.md and prints it last. Exit status: the tests'.
set -uo pipefail
cd "$(dirname "$0")/.."
deps="$(realpath "${1:-${TPSERVE_GPU_DEPS:-shared/deps}}")"
build="${TPSERVE_GPU_BUILD:-build-gpu}"
jobs="$(nproc)"
arch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
start=$SECONDS
if [[ ! -d "$deps/src/googletest" ]]; then
  echo "gpu-check: $deps has no src/googletest; run scripts/pack-gpu-deps.sh on a machine with the Debian packages and bring the folder along" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# GoogleTest from the carried sources, installed next to the build.
gtest_prefix="$PWD/$build/_gtest"
if [[ ! -f "$gtest_prefix/lib/cmake/GTest/GTestConfig.cmake" ]]; then
  cmake -S "$deps/src/googletest" -B "$build/_gtest_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$gtest_prefix" -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON >/dev/null &&
    cmake --build "$build/_gtest_build" -j "$jobs" >/dev/null &&
    cmake --install "$build/_gtest_build" >/dev/null || { echo "gpu-check: GoogleTest build failed" >&2; exit 2; }
fi

export LD_LIBRARY_PATH="$deps/lib:$deps/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPSERVE_CUDA=ON -DTPSERVE_ENGINE_ONLY=ON \
  -DTPSERVE_CUDA_EMU=OFF \
  -DTPSERVE_BLAS=OFF -DCMAKE_CUDA_ARCHITECTURES=native \
  -DCMAKE_PREFIX_PATH="$deps;$gtest_prefix" -DCMAKE_INCLUDE_PATH="$deps/include" \
  -DCMAKE_LIBRARY_PATH="$deps/lib;$deps/lib/$arch" >"$build.configure.log" 2>&1 ||
  { tail -30 "$build.configure.log"; echo "gpu-check: configure failed (log: $build.configure.log)" >&2; exit 2; }
# Every executable behind a `gpu` test (whatever tests/ registers; a new one
# cannot be forgotten here), the rank helper of the comm tests, and the benches.
gpu_targets="$(ninja -C "$build" -t targets all 2>/dev/null |
  sed -n 's/^\(cuda_[a-z0-9_]*_test\|attention_merge_test\|comm_gpu_test\|comm_test_rank\): phony$/\1/p' | sort -u)"
# shellcheck disable=SC2086
ninja -C "$build" $gpu_targets gpu_bench sampling_bench >"$build.build.log" 2>&1 ||
  { tail -40 "$build.build.log"; echo "gpu-check: build failed (log: $build.build.log)" >&2; exit 2; }
echo "gpu-check: built in $((SECONDS - start)) s"

ctest --test-dir "$build" -L gpu --output-on-failure --timeout 300 2>&1 | tee "$build.ctest.log" | tail -25
tests_rc=${PIPESTATUS[0]}

mkdir -p bench/results
# gpu_bench writes its table after every section (attention, models, then the
# longest, the offline throughput run): a run cut short keeps what it measured.
timeout 240 "$build/bench/gpu/gpu_bench" --out bench/results/gpu_bench.md --workdir "${TMPDIR:-/tmp}" \
  >"$build.bench.log" 2>&1
bench_rc=$?
timeout 120 "$build/bench/gpu/sampling_bench" >"$build.sampling_bench.log" 2>&1 ||
  echo "sampling_bench failed (log: $build.sampling_bench.log)"
echo
echo "==== gpu-check summary ($((SECONDS - start)) s) ===="
grep -E "tests passed|tests failed" "$build.ctest.log" || true
if [[ $bench_rc -eq 0 ]]; then cat bench/results/gpu_bench.md; else
  tail -20 "$build.bench.log"; echo "gpu_bench failed ($bench_rc; 124 = cut at 240 s); what it measured:"
  cat bench/results/gpu_bench.md 2>/dev/null || true
fi
cat "$build.sampling_bench.log" 2>/dev/null || true
exit "$tests_rc"
