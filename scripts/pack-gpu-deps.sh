#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs from this machine's Debian installs into
# one folder (default shared/deps) for a GPU machine that has only the CUDA
# toolkit, CMake and ninja: GoogleTest sources, nlohmann-json headers, abseil
# headers + shared libraries + CMake package, gloo headers + library (for the
# tp = 2 on one GPU test) and every library those need that a machine with only
# glibc, the C++ runtime and the CUDA toolkit lacks (gloo: hiredis, ibverbs,
# libnl-3, libnl-route-3). Then proves the folder self-sufficient with
# scripts/check-gpu-deps.sh (ldd of every packed library resolves inside it).
# Prints the size; it must stay under 64 MiB.
#
#   scripts/pack-gpu-deps.sh [OUT_DIR]
set -euo pipefail
out="${1:-shared/deps}"
arch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
lib="/usr/lib/${arch}"
rm -rf "$out"
# Laid out like /usr, so the abseil CMake package (which finds its prefix four
# folders above lib/<arch>/cmake/absl) works unchanged with CMAKE_PREFIX_PATH=OUT.
mkdir -p "$out/include" "$out/lib/${arch}/cmake" "$out/lib/cmake" "$out/src"

cp -r /usr/src/googletest "$out/src/googletest"
cp -r /usr/include/nlohmann "$out/include/"
cp -r /usr/include/absl "$out/include/"
cp -a "$lib"/libabsl_*.so* "$out/lib/${arch}/"
cp -r "$lib/cmake/absl" "$out/lib/${arch}/cmake/"
cp -r "$(dirname "$(find /usr/share/cmake /usr/lib -name 'nlohmann_jsonConfig.cmake' 2>/dev/null | head -1)")" \
  "$out/lib/cmake/nlohmann_json"
if [[ -d /usr/include/gloo ]]; then
  cp -r /usr/include/gloo "$out/include/"
  cp -a /usr/lib/libgloo.so* "$lib"/libgloo.so* "$out/lib/" 2>/dev/null || true
fi
# The libraries the packed ones need (transitively: ldd lists the whole
# closure), by soname, except those every GPU machine has (gpu-base-libs.sh)
# and those already packed.
# shellcheck source=scripts/gpu-base-libs.sh
source "$(dirname "$0")/gpu-base-libs.sh"
while read -r name path; do
  [[ "$name" =~ $gpu_base_libs_re ]] && continue
  [[ -e "$out/lib/$name" || -e "$out/lib/${arch}/$name" ]] && continue
  cp -L "$path" "$out/lib/$name"
  echo "pack-gpu-deps: + $name (needed by the packed libraries)"
done < <(find "$out/lib" -name '*.so*' -type f -exec ldd {} + 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
echo "packed into $out: $(du -sh "$out" | cut -f1) (limit 64 MiB)"
"$(dirname "$0")/check-gpu-deps.sh" "$out"
