#!/usr/bin/env bash
# Soaks the suite: reruns the multi-process tests (labels e2e, tp and soak:
# real coordinators, workers and ranks, where timing varies from run to run)
# round after round, to show that they pass every time, not most times.
# scripts/test.sh --repeat N calls this after its normal run.
#
#   scripts/soak-suite.sh                 20 rounds of -L 'e2e|tp|soak'
#   scripts/soak-suite.sh 50 -R Overlap   50 rounds of the tests matching a regex
#
# Uses an existing build (TPSERVE_BUILD_DIR, default build/). Each round is one
# `ctest -j $(nproc)` over the tests; a failing round's JUnit report (every
# test's output, seeds included) stays in $build/soak-suite/round-K.xml. The
# summary counts the green rounds and names each test that failed and in which
# rounds; exit status 1 unless every round was green. The randomized tests draw
# their fixed seeds (tests/testing/seed.h), so a failure here is timing, not a
# seed: scripts/seed-sweep.sh hunts seeds.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=20
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  rounds=$1
  shift
fi
ctest_args=("$@")
[[ ${#ctest_args[@]} -eq 0 ]] && ctest_args=(-L 'e2e|tp|soak')
build=${TPSERVE_BUILD_DIR:-build}
[[ -f "$build/CTestTestfile.cmake" ]] || {
  echo "soak-suite.sh: no test tree in $build; build it first (scripts/test.sh, or cmake --build $build)" >&2
  exit 2
}
reports="$build/soak-suite"
rm -rf "$reports"
mkdir -p "$reports"

green=0
failed=$(mktemp)
trap 'rm -f "$failed"' EXIT
start=$(date +%s)
for round in $(seq "$rounds"); do
  junit="$PWD/$reports/round-$round.xml"
  t0=$(date +%s)
  status=0
  ctest --test-dir "$build" -j "$(nproc)" --output-junit "$junit" "${ctest_args[@]}" >/dev/null 2>&1 || status=$?
  names=$(python3 - "$junit" <<'EOF'
import sys
import xml.etree.ElementTree as ET
cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
bad = [c.get("name", "?").split(" ")[0] for c in cases
       if c.get("status") == "fail" or c.find("failure") is not None]
print(len(cases), " ".join(bad))
EOF
  )
  count=${names%% *}
  bad=${names#* }
  [[ $bad == "$names" ]] && bad=""
  if [[ $status -eq 0 && -z $bad ]]; then
    green=$((green + 1))
    rm -f "$junit"
    echo "soak-suite.sh: round $round/$rounds green ($count tests, $(( $(date +%s) - t0 )) s)"
  else
    echo "soak-suite.sh: round $round/$rounds FAILED ($(( $(date +%s) - t0 )) s): ${bad:-ctest exit status $status}; report: $junit"
    for name in ${bad:-"(ctest exit status $status)"}; do printf '%s\t%s\n' "$name" "$round" >>"$failed"; done
  fi
done

echo
echo "soak-suite.sh: $green/$rounds rounds green of ctest ${ctest_args[*]} ($(( $(date +%s) - start )) s)"
if [[ -s "$failed" ]]; then
  echo "failed (test: rounds):"
  sort "$failed" | awk -F'\t' '{r[$1] = r[$1] (r[$1] ? "," : "") $2} END {for (t in r) print "  " t ": " r[t]}'
  exit 1
fi
