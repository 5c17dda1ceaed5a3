#!/usr/bin/env bash
# Hunts for seeds that fail the randomized tests. CI runs every randomized test
# with a fixed seed (tests/testing/seed.h), so it never fails for the seed it
# drew; this script draws fresh ones (TPSERVE_TEST_SEED=random) round after
# round and lists each failure with the seed that replays it. A seed found here
# becomes a fixed case of its test (or shows a tolerance that is not derived
# from the arithmetic): fix the cause, not the seed.
#
#   scripts/seed-sweep.sh                   5 rounds of the unit, cuda-emu and tp labels
#   scripts/seed-sweep.sh 20 -L cuda-emu    20 rounds of one label
#   scripts/seed-sweep.sh 50 -R SmallBatch  50 rounds of the tests matching a regex
#
# Uses an existing build (TPSERVE_BUILD_DIR, default build/: scripts/test.sh
# makes it). Exit status 1 when any round failed; the summary names each failing
# test and its seeds, and the replay command:
#   TPSERVE_TEST_SEED=<seed> ctest --test-dir build -R '<test>' --output-on-failure
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=5
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  rounds=$1
  shift
fi
ctest_args=("$@")
[[ ${#ctest_args[@]} -eq 0 ]] && ctest_args=(-L 'unit|cuda-emu|tp')
build=${TPSERVE_BUILD_DIR:-build}
[[ -f "$build/CTestTestfile.cmake" ]] || {
  echo "seed-sweep.sh: no test tree in $build; build it first (scripts/test.sh, or cmake --build $build)" >&2
  exit 2
}

found=$(mktemp)
junit=$(mktemp --suffix=.xml)
trap 'rm -f "$found" "$junit"' EXIT
for round in $(seq "$rounds"); do
  echo "seed-sweep.sh: round $round of $rounds: ctest ${ctest_args[*]} with fresh seeds"
  status=0
  TPSERVE_TEST_SEED=random ctest --test-dir "$build" -j "$(nproc)" --output-junit "$junit" "${ctest_args[@]}" \
    >/dev/null 2>&1 || status=$?
  # The JUnit report holds each test's outcome and output: the seeds it drew.
  python3 - "$junit" "$round" >>"$found" <<'EOF'
import re, sys
import xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.get("status") != "fail" and case.find("failure") is None:
        continue
    out = case.findtext("system-out") or ""
    seeds = sorted(set(re.findall(r": seed (\d+) \(random;", out)))
    name = case.get("name", "?").split(" ")[0]
    print(f"{name}\t{','.join(seeds) or '(no seed drawn)'}\tround {sys.argv[2]}")
EOF
  [[ $status -eq 0 ]] || echo "seed-sweep.sh: round $round: ctest exit status $status"
done

if [[ ! -s "$found" ]]; then
  echo "seed-sweep.sh: no failure in $rounds round(s) of ctest ${ctest_args[*]}"
  exit 0
fi
echo
echo "seed-sweep.sh: failures (test, seeds it drew, when):"
sort "$found" | column -t -s $'\t'
echo
echo "Replay one: TPSERVE_TEST_SEED=<seed> ctest --test-dir $build -R '<test>' --output-on-failure"
exit 1
