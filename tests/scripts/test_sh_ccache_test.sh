#!/usr/bin/env bash
# scripts/test.sh on a fresh machine, where ccache is not installed until its
# install-deps stage installs it (CI's case; ctest: scripts.test_sh_ccache):
#   * the build and demo build folders are configured with ccache as their
#     compiler launcher, so the demo build takes build/'s objects from the cache;
#   * the stage table says the run compiles through ccache, with a row per build
#     of how many compiles came from the cache;
#   * with TPSERVE_CCACHE=0 no folder gets the launcher, and the table says so.
# scripts/ is copied into a scratch tree whose install-deps.sh puts a ccache on
# PATH (a script that runs the compiler it is given), the fetches, fuzz.sh and
# test-sanitized.sh are no-ops, and cmake and ctest are stand-ins that record the
# launcher each configure saw.
#
#   tests/scripts/test_sh_ccache_test.sh
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

tree="$tmp/tree"
mkdir -p "$tree/tests" "$tmp/bin" "$tmp/later-bin"
cp -r "$repo/scripts" "$tree/scripts"
touch "$tree/tests/ctest-costs.txt"
for s in fetch-tokenizers fetch-openai-client fetch-json-schema-suite fuzz test-sanitized; do
  printf '#!/usr/bin/env bash\nexit 0\n' >"$tree/scripts/$s.sh"
done
# "Installing" ccache: a later-bin folder on PATH gets it (PATH lists it from the
# start, empty until now, as /usr/bin is for a package that apt installs).
cat >"$tree/scripts/install-deps.sh" <<EOF
#!/usr/bin/env bash
cat >"$tmp/later-bin/ccache" <<'CCACHE'
#!/usr/bin/env bash
[[ \${1:-} == --print-stats ]] && { printf 'direct_cache_hit\t0\ncache_miss\t0\n'; exit 0; }
exec "\$@"
CCACHE
chmod +x "$tmp/later-bin/ccache"
EOF
# cmake: a configure records the launcher it was given; a build does nothing.
cat >"$tmp/bin/cmake" <<EOF
#!/usr/bin/env bash
[[ \$1 == -S ]] && echo "\$4 \${CMAKE_CXX_COMPILER_LAUNCHER:-none}" >>"$tmp/configures"
exit 0
EOF
printf '#!/usr/bin/env bash\nexit 0\n' >"$tmp/bin/ctest"
chmod +x "$tree/scripts/"*.sh "$tmp/bin/cmake" "$tmp/bin/ctest"

# A PATH without the machine's own ccache: the stand-ins, then a folder of links
# to every program on PATH but ccache.
mkdir -p "$tmp/sys"
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  for f in "$d"/*; do
    [[ -x $f && ! -d $f && ${f##*/} != ccache && ! -e "$tmp/sys/${f##*/}" ]] && ln -s "$f" "$tmp/sys/${f##*/}"
  done
done
path="$tmp/bin:$tmp/later-bin:$tmp/sys"

run() {  # run NAME [ENV...]: scripts/test.sh in the scratch tree, its output in $tmp/NAME.txt
  local name=$1
  shift
  rm -f "$tmp/configures" "$tmp/later-bin/ccache"
  env -u CMAKE_CXX_COMPILER_LAUNCHER -u CMAKE_C_COMPILER_LAUNCHER -u CMAKE_CUDA_COMPILER_LAUNCHER \
    -u TPSERVE_STAGE_FILE -u TPSERVE_CCACHE_NOTED PATH="$path" HOME="$tmp/home" XDG_CACHE_HOME="$tmp/cache" \
    "$@" "$BASH" "$tree/scripts/test.sh" >"$tmp/$name.txt" 2>&1 || { cat "$tmp/$name.txt"; fail "$name: test.sh failed"; }
}

# 1. ccache arrives with install-deps: both folders compile through it.
run fresh
grep -qx 'build ccache' "$tmp/configures" || { cat "$tmp/configures"; fail "build/ was configured without ccache"; }
grep -qx 'build-release ccache' "$tmp/configures" ||
  { cat "$tmp/configures"; fail "the demo build was configured without ccache"; }
grep -q '^| compile cache .*| ccache in ' "$tmp/fresh.txt" || { cat "$tmp/fresh.txt"; fail "the table does not say ccache is on"; }
grep -q '^|   demo build, ccache .*| 0 of 0 compiles from the cache' "$tmp/fresh.txt" ||
  { cat "$tmp/fresh.txt"; fail "no cache row for the demo build"; }

# 2. TPSERVE_CCACHE=0: no launcher, and the table says why.
run off TPSERVE_CCACHE=0
! grep -q ' ccache$' "$tmp/configures" || { cat "$tmp/configures"; fail "TPSERVE_CCACHE=0 still configured ccache"; }
grep -q '^| compile cache .*| off (TPSERVE_CCACHE=0)' "$tmp/off.txt" || { cat "$tmp/off.txt"; fail "the table does not say the cache is off"; }
echo "PASS"
