#!/usr/bin/env bash
# scripts/gpu-check.sh's own logic, without a GPU (ctest: scripts.gpu_check):
#   * a machine or pack that fails the preflight stops the check at once
#     (exit 2), with the phase named in summary.md;
#   * a cap of 0 skips its phase (timeout 0 would mean no limit): with every
#     cap 0 each phase is reported skipped, the summary is written, exit 0;
#   * a cap that is not a whole number is refused, naming its variable;
#   * the preflight's host check names every missing library version in one
#     line, and a tool that cannot reach the device is reported as not working;
#   * the memcheck phase, when the preflight found compute-sanitizer not
#     working, is skipped with the reason, not failed;
#   * with a GPU test executable as $1 (ctest passes cuda_convert_test) and no
#     GPU here: the test skips, but fails under TPSERVE_REQUIRE_GPU=1, naming
#     the runtime's error, so a GPU run that tested nothing cannot pass.
#
#   tests/scripts/gpu_check_test.sh [GPU_TEST_EXECUTABLE]
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

# 4. The host's library versions: impossible ones are all named in one line; this machine's pass.
# shellcheck source=../../scripts/lib/gpu-host.sh
source "$repo/scripts/lib/gpu-host.sh"
line="$(host_libs_missing 99.1 GLIBCXX_9.9.99)" && fail "glibc 99.1 and GLIBCXX_9.9.99 were found"
[[ "$(wc -l <<<"$line")" -eq 1 ]] || fail "the missing versions take more than one line: $line"
[[ "$line" == *"glibc >= 99.1 (this machine: "*"GLIBCXX_9.9.99 ("* ]] || fail "not every missing version named: $line"
host_libs_missing 2.0 GLIBCXX_3.4 >/dev/null || fail "glibc 2.0 and GLIBCXX_3.4 were not found here"

# 5. A tool that cannot reach the device (what compute-sanitizer says on gVisor) does not work;
#    one that runs the probe cleanly does.
printf '#!/bin/sh\necho "========= COMPUTE-SANITIZER"\necho "========= Error: Device not supported"\nexit 0\n' >"$tmp/broken-tool"
printf '#!/bin/sh\nshift; "$@"; echo "========= ERROR SUMMARY: 0 errors"\n' >"$tmp/good-tool"
printf '#!/bin/sh\necho probe ran\n' >"$tmp/probe"
chmod +x "$tmp/broken-tool" "$tmp/good-tool" "$tmp/probe"
line="$(tool_works compute-sanitizer "$tmp/probe" "$tmp/broken-tool" "$tmp/probe")" && fail "the broken tool counts as working"
[[ "$line" == "compute-sanitizer: does not work here (exit 0): "*"Device not supported"* ]] || fail "reason not given: $line"
line="$(tool_works compute-sanitizer "$tmp/probe" "$tmp/good-tool" --tool "$tmp/probe")" || fail "the good tool: $line"
[[ "$line" == "compute-sanitizer: works" ]] || fail "the good tool: $line"

# 6. The memcheck phase after such a preflight: skipped with the reason (exit 77), nothing run.
mkdir -p "$tmp/work"
echo "compute-sanitizer: does not work here (exit 0): ========= Error: Device not supported" >"$tmp/work/memcheck.skip"
line="$(TPSERVE_GPU_DEPS="$tmp/no-deps" TPSERVE_GPU_OUT="$tmp/out6" TPSERVE_GPU_BUILD="$tmp/build-gpu" work="$tmp/work" \
  "$repo/scripts/gpu-check.sh" __phase memcheck 2>&1)"
rc=$?
[[ $rc -eq 77 && "$line" == *"Device not supported"* ]] || fail "memcheck without a working sanitizer: exit $rc, $line"

# 7. A GPU test without a GPU: skipped, but failed under TPSERVE_REQUIRE_GPU=1.
if [[ -n "${1:-}" ]]; then
  if timeout 10 nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: a GPU is present, the no-GPU cases of $1 are not tried"
  else
    "$1" >"$tmp/run7a.txt" 2>&1 || { cat "$tmp/run7a.txt"; fail "$1 without a GPU did not pass (skipped)"; }
    grep -q "SKIPPED" "$tmp/run7a.txt" || { cat "$tmp/run7a.txt"; fail "$1 without a GPU did not skip"; }
    TPSERVE_REQUIRE_GPU=1 "$1" >"$tmp/run7b.txt" 2>&1 && { cat "$tmp/run7b.txt"; fail "$1 passed with TPSERVE_REQUIRE_GPU=1 and no GPU"; }
    grep -q "TPSERVE_REQUIRE_GPU=1 says this run must have one: cudaGetDeviceCount: " "$tmp/run7b.txt" ||
      { cat "$tmp/run7b.txt"; fail "the failure does not carry the runtime's error"; }
    grep -q "driver CUDA version" "$tmp/run7b.txt" || fail "the failure does not carry the driver version"
    ! grep -q "SKIPPED" "$tmp/run7b.txt" || fail "a test still skipped under TPSERVE_REQUIRE_GPU=1"
  fi
fi
echo "gpu-check: preflight stop, skipped phases, cap checks, host and tool checks, required GPU behave"
