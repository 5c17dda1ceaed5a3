#!/usr/bin/env bash
# Proves that a folder packed by scripts/pack-gpu-deps.sh is all a machine with
# only glibc, the C++ runtime and the CUDA toolkit needs to build and run the
# engine-only build (the GPU machine has no Debian packages).
#
#   scripts/check-gpu-deps.sh DEPS [--build BUILD [TARGET...]] [--exes BUILD]
#
# --build: configures the engine-only build in BUILD against DEPS alone
#   (scripts/gpu-configure.sh: -Wl,--no-undefined, the pack first for the
#   linker, an empty LD_LIBRARY_PATH; CUDA off unless TPSERVE_CUDA is set in the
#   environment), checks that abseil and gloo came from DEPS, and builds TARGETs
#   (default: a gloo rank, a GoogleTest suite and tpserve-make-model);
# --exes: only checks the executables already built in BUILD (gpu-check.sh).
# Then `ldd` of every executable in BUILD with an empty LD_LIBRARY_PATH (their
# RPATH must reach the pack, for the pack's own dependencies too) and of every
# shared library in DEPS with LD_LIBRARY_PATH=DEPS's lib folders must show no
# "not found" (missing library or symbol version), and every library it
# resolves must lie in DEPS or be one the GPU machine has anyway (glibc,
# libstdc++, libgcc_s, the CUDA toolkit's): a library found in /usr/lib here
# would be missing there.
# Exit status 0 when all of that holds; every offence is printed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
deps="$(realpath "${1:?usage: check-gpu-deps.sh DEPS [--build BUILD [TARGET...]] [--exes BUILD]}")"
shift
arch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
build=""
if [[ "${1:-}" == "--build" ]]; then
  build="${2:?--build needs a folder}"
  shift 2
  targets=("$@")
  [[ ${#targets[@]} -gt 0 ]] || targets=(comm_test_rank comm_solo_test tpserve-make-model)
  env -u LD_LIBRARY_PATH scripts/gpu-configure.sh "$deps" "$build" -DTPSERVE_CUDA="${TPSERVE_CUDA:-OFF}" || exit 2
  for var in absl_DIR TPSERVE_GLOO_LIBRARY TPSERVE_GLOO_INCLUDE_DIR; do
    value="$(sed -n "s/^$var:[A-Z]*=//p" "$build/CMakeCache.txt")"
    if [[ "$value" != "$deps"/* ]]; then
      echo "check-gpu-deps: $var = '$value' is not inside $deps: the build did not use the pack alone" >&2
      exit 1
    fi
  done
  env -u LD_LIBRARY_PATH ninja -C "$build" -j "${TPSERVE_JOBS:-$(nproc)}" "${targets[@]}" >"$build.build.log" 2>&1 ||
    { tail -30 "$build.build.log"; echo "check-gpu-deps: build failed (log: $build.build.log)" >&2; exit 1; }
elif [[ "${1:-}" == "--exes" ]]; then
  build="${2:?--exes needs a folder}"
fi

# shellcheck source=scripts/gpu-base-libs.sh
source scripts/gpu-base-libs.sh
files=() exes=()
while IFS= read -r f; do files+=("$f"); done < <(find "$deps/lib" -name '*.so*' -type f 2>/dev/null | sort)
if [[ -n "$build" ]]; then
  while IFS= read -r f; do
    file -b "$f" | grep -q '^ELF.*executable' && exes+=("$f")
  done < <(find "$build" -path "$build/_gtest*" -prune -o -type f -perm -u+x -print | sort)
fi
bad=0
for f in "${files[@]}" "${exes[@]}"; do
  if [[ "$f" == "$deps"/* ]]; then
    out="$(LD_LIBRARY_PATH="$deps/lib:$deps/lib/$arch" ldd "$f" 2>&1)"
  else
    out="$(env -u LD_LIBRARY_PATH ldd "$f" 2>&1)"
  fi
  if grep -q "not found" <<<"$out"; then
    echo "check-gpu-deps: $f: $(grep "not found" <<<"$out" | tr -s ' \t' ' ' | paste -sd';')"
    bad=1
  fi
  while read -r name _ path _; do
    [[ "$name" =~ $gpu_base_libs_re ]] && continue
    [[ "$path" == "$deps"/* || "$path" == /usr/local/cuda* ]] && continue
    echo "check-gpu-deps: $f needs $name, found at $path outside the pack (the GPU machine will not have it)"
    bad=1
  done < <(grep "=> /" <<<"$out")
done
echo "check-gpu-deps: ${#files[@]} packed libraries${build:+ and ${#exes[@]} executables of $build} checked:" \
  "$([[ $bad == 0 ]] && echo OK || echo FAILED)"
exit "$bad"
