# shellcheck shell=bash
# Sourced by scripts/test.sh, scripts/test-sanitized.sh and scripts/fuzz.sh: each
# stage of a run timed, and a table of the stages printed when the run ends,
# also when a stage fails (an EXIT trap).
#
#   stage_run NAME CMD ARGS...   runs CMD, records NAME's wall time, the CPU time
#                                of the processes it started (user + system, what
#                                `times` reports for reaped children: ninja's
#                                compilers, ctest's tests) and the 1-minute load
#                                average when it began; returns CMD's status
#   stage_note NAME TEXT         a row without a time
#   stage_ctest NAME BUILD ARGS  `ctest --test-dir BUILD ARGS` as stage NAME, then a
#                                row per label with its seconds of test time
#   stage_table_on_exit          prints the table at exit; only the outermost
#                                script prints: a script it runs writes its rows
#                                into the same file (TPSERVE_STAGE_FILE)
#
# On a shared machine the wall time grows with the load; the CPU time is what the
# stage itself cost, and CPU / wall shows how many cores it kept busy.

# The children's user and system seconds so far, summed (line 2 of `times`), into
# _stage_cpu. `times` must run in this shell: in a subshell, as in $(times), the
# count starts from zero.
_stage_child_cpu() {
  times >"$TPSERVE_STAGE_FILE.times"
  # "0m1.234s 0m0.567s" -> 1.8
  _stage_cpu=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); t += p[1] * 60 + p[2] }
                              printf "%.1f", t }' "$TPSERVE_STAGE_FILE.times")
}

_stage_now() { date +%s.%N; }

stage_run() {
  local name=$1
  shift
  local start cpu0 load status=0
  start=$(_stage_now)
  _stage_child_cpu
  cpu0=$_stage_cpu
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')
  # A start record: a stage still running when the run ends (killed, a CI time
  # limit) shows in the table with its time so far.
  printf '%s\037\037\037%s\037started@%s\n' "$name" "$load" "$start" >>"$TPSERVE_STAGE_FILE"
  "$@" || status=$?
  local wall cpu
  wall=$(awk -v a="$start" -v b="$(_stage_now)" 'BEGIN { printf "%.0f", b - a }')
  _stage_child_cpu
  cpu=$(awk -v a="$cpu0" -v b="$_stage_cpu" 'BEGIN { printf "%.0f", b - a }')
  printf '%s\037%s\037%s\037%s\037%s\n' "$name" "$wall" "$cpu" "$load" \
    "$([[ $status -eq 0 ]] && echo ok || echo "FAILED ($status)")" >>"$TPSERVE_STAGE_FILE"
  return "$status"
}

stage_note() {
  printf '%s\037\037\037\037%s\n' "$1" "$2" >>"$TPSERVE_STAGE_FILE"
}

# ctest's "Label Time Summary" (seconds of test time per label, summed over the
# tests: with -j N they overlap) from a saved ctest output, one row per label.
stage_note_ctest_labels() {
  local prefix=$1 log=$2
  [[ -f "$log" ]] || return 0
  awk '/^Label Time Summary:/ { on = 1; next } on && /^ *[^ ]+ += +[0-9.]+ sec\*proc/ { print $1 "\t" $3 } on && /^$/ { on = 0 }' \
    "$log" | while IFS=$'\t' read -r label secs; do
    stage_note "$prefix $label" "$(printf '%.0f' "$secs") s of test time (sec*proc)"
  done
}

_stage_ctest_tee() {
  local log=$1
  shift
  ctest "$@" 2>&1 | tee "$log"
}

# A fresh build folder has no test times of its own yet (ctest keeps them in
# Testing/Temporary/CTestCostData.txt and starts the longest tests first): its
# first run starts from tests/ctest-costs.txt (the tests of 1 s or more, measured),
# so no long test starts last and runs alone at the end.
stage_ctest() {
  local name=$1 build=$2 status=0
  shift 2
  local dir="$build/Testing/Temporary"
  mkdir -p "$dir"
  [[ -f "$dir/CTestCostData.txt" ]] || cp tests/ctest-costs.txt "$dir/CTestCostData.txt"
  stage_run "$name" _stage_ctest_tee "$dir/stage-ctest.log" --test-dir "$build" "$@" || status=$?
  stage_note_ctest_labels "  $name, label" "$dir/stage-ctest.log"
  return "$status"
}

_stage_print_table() {
  local status=$?
  [[ -s "$TPSERVE_STAGE_FILE" ]] || return "$status"
  local total
  total=$(awk -v a="$_stage_run_start" -v b="$(_stage_now)" 'BEGIN { printf "%.0f", b - a }')
  {
    echo
    echo "Stage times ($(nproc) cores; load average now: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)):"
    printf '| %-34s | %7s | %7s | %6s | %s\n' stage 'wall s' 'CPU s' load result
    printf '|%s|%s|%s|%s|%s\n' "$(printf -- '-%.0s' {1..36})" --------- --------- -------- --------
    # Each finished stage takes its start record's place (stages in the order
    # they began, a nested script's inside its caller's); a start never
    # finished is a stage the run ended in.
    awk -F '\037' -v now="$(_stage_now)" -v total="$total" -v status="$status" '
      $5 ~ /^started@/ { n++; row[n] = $0; open[$1] = open[$1] " " n; next }
      {
        k = split(open[$1], idx, " ")
        if (k > 0) { row[idx[k]] = $0; sub(/ [0-9]+$/, "", open[$1]) } else { n++; row[n] = $0 }
      }
      END {
        for (i = 1; i <= n; i++) {
          split(row[i], f, "\037")
          if (f[5] ~ /^started@/) {
            f[2] = sprintf("%.0f", now - substr(f[5], 9)); f[5] = "ended while running"; cut = 1
          }
          printf "| %-34s | %7s | %7s | %6s | %s\n", f[1], f[2], f[3], f[4], f[5]
        }
        result = status != 0 ? "FAILED (" status ")" : cut ? "ended early" : "ok"
        printf "| %-34s | %7s | %7s | %6s | %s\n", "total", total, "", "", result
      }' "$TPSERVE_STAGE_FILE"
  } >&2
  rm -f "$TPSERVE_STAGE_FILE" "$TPSERVE_STAGE_FILE.times"
  return "$status"
}

stage_table_on_exit() {
  if [[ -z "${TPSERVE_STAGE_FILE:-}" ]]; then
    TPSERVE_STAGE_FILE=$(mktemp "${TMPDIR:-/tmp}/tpserve-stages-XXXXXX")
    export TPSERVE_STAGE_FILE
    _stage_run_start=$(_stage_now)
    trap _stage_print_table EXIT
  fi
}
