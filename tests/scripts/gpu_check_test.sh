#!/usr/bin/env bash
# scripts/gpu-check.sh's own logic, without a GPU (ctest: scripts.gpu_check):
#   * a machine or pack that fails the preflight stops the check at once
#     (exit 2), with the phase named in summary.md;
#   * a cap of 0 skips its phase (timeout 0 would mean no limit): with every
#     cap 0 each phase is reported skipped, the summary is written, exit 0;
#   * a cap that is not a whole number is refused, naming its variable.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export TPSERVE_GPU_BUILD="$tmp/build-gpu"
fail() { echo "FAIL: $*"; exit 1; }

# 1. A pack without GoogleTest (and, here, no GPU): the preflight fails, nothing else runs.
"$repo/scripts/gpu-check.sh" "$tmp/no-deps" "$tmp/out1" >"$tmp/run1.txt" 2>&1
rc=$?
[[ $rc -eq 2 ]] || { cat "$tmp/run1.txt"; fail "a failed preflight exits $rc, not 2"; }
grep -q '^| preflight | FAILED' "$tmp/out1/summary.md" || fail "summary.md does not name the failed preflight"
grep -q 'has no src/googletest' "$tmp/out1/gpu-check.log" || fail "the log does not say what the pack lacks"
! grep -qE '^\| (configure|build|deps|tests|memcheck|bench|sampling|parity) \|' "$tmp/out1/summary.md" ||
  fail "phases ran after a failed preflight"

# 2. Every cap 0: every phase skipped, exit 0, well inside a second or two.
caps=()
for p in preflight configure build deps tests memcheck bench sampling parity; do caps+=("TPSERVE_CAP_${p^^}=0"); done
env "${caps[@]}" "$repo/scripts/gpu-check.sh" "$tmp/no-deps" "$tmp/out2" >"$tmp/run2.txt" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { cat "$tmp/run2.txt"; fail "a run of skipped phases exits $rc"; }
for p in preflight configure build deps tests bench sampling parity; do
  grep -q "^| $p | skipped | 0 |" "$tmp/out2/summary.md" || { cat "$tmp/out2/summary.md"; fail "$p is not reported skipped"; }
done
grep -q "of at most 0 s" "$tmp/out2/summary.md" || fail "the summary's total of the caps is not 0"

# 3. A cap that is not a number.
TPSERVE_CAP_BENCH=2m "$repo/scripts/gpu-check.sh" "$tmp/no-deps" "$tmp/out3" >"$tmp/run3.txt" 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "a bad cap exits $rc, not 2"
grep -q 'TPSERVE_CAP_BENCH=2m is not a whole number' "$tmp/run3.txt" || { cat "$tmp/run3.txt"; fail "the bad cap is not named"; }
echo "gpu-check: preflight stop, skipped phases and cap checks behave"
